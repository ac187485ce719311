fn main() -> std::process::ExitCode {
    llmload::cli::main()
}
