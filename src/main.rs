fn main() {
    let plan = llmload::plan::load(std::path::Path::new(&std::env::args().nth(1).unwrap_or_default()));
    match plan {
        Ok(p) => println!("{p:#?}"),
        Err(e) => eprintln!("{}", e.render()),
    }
}
