mod cli;
mod compare;
mod export;
mod fixture;
mod html;
mod report;
mod summary_agreement;
