mod cli;
mod compare;
mod export;
mod fixture;
mod harness_agreement;
mod html;
mod report;
