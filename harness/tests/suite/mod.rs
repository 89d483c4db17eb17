mod datasets;
mod pack;
mod sandbox;
