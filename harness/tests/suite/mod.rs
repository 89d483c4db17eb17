mod curate;
mod datasets;
mod pack;
mod sandbox;
mod search;
