mod pack;
mod sandbox;
