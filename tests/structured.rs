//! Structured output: a plan's `response-format` reaches the server (the simulator answers
//! `{"answer": ...}` when asked for JSON), every successful answer is checked (JSON, and valid
//! under the plan's schema), and `invalid-json-rate` gates the run.

mod common;

use common::{run_in, serial};

fn plan(format: &str, stream: bool) -> String {
    format!(
        "plan \"json\" {{ seed 3; }}\n\
         target \"sim\" {{ api \"chat\"; stream #{stream}; timeout \"10s\"; response-format {format}; }}\n\
         sim {{ ttft \"10ms\"; itl \"2ms\"; }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 32; output 8 ignore-eos=#true; }}\n\
         phase \"steady\" {{ concurrency 2; requests 6; }}\n\
         sla {{ invalid-json-rate < \"1%\"; }}\n"
    )
}

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

const ANSWER_SCHEMA: &str =
    r#"{"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}}"#;
const VERDICT_SCHEMA: &str = r#"{"type": "object", "required": ["verdict"]}"#;

#[test]
fn answers_are_checked_against_the_asked_format_and_gate_the_run() {
    let _serial = serial();
    let schemas = [
        ("answer.json", ANSWER_SCHEMA),
        ("verdict.json", VERDICT_SCHEMA),
    ];
    for (format, stream, code, invalid) in [
        ("\"json-object\"", true, 0, 0),
        ("\"json-object\"", false, 0, 0),
        ("\"json-schema\" schema=\"answer.json\"", true, 0, 0),
        // The simulator's answers have no `verdict`: every one is invalid under this schema.
        ("\"json-schema\" schema=\"verdict.json\"", true, 1, 6),
    ] {
        let run = run_in(dir_with(&schemas), &plan(format, stream), &[]);
        assert_eq!(
            run.code(),
            code,
            "{format} stream {stream}: {}{}",
            run.stdout(),
            run.stderr()
        );
        let answers = &run.summary()["overall"]["answers"];
        assert_eq!(answers["checked"], 6, "{format}: {answers}");
        assert_eq!(answers["invalid"], invalid, "{format}: {answers}");
        for r in run.records() {
            assert_eq!(r["answer_valid"], invalid == 0, "{r}");
        }
    }
}

#[test]
fn a_schema_that_is_not_one_is_a_plan_mistake() {
    for (schema, says) in [
        ("{not json", "is not JSON"),
        (r#"{"type": 12}"#, "is not a usable JSON Schema"),
    ] {
        let dir = dir_with(&[("s.json", schema)]);
        let path = dir.path().join("plan.kdl");
        std::fs::write(&path, plan("\"json-schema\" schema=\"s.json\"", true)).unwrap();
        let out = common::llmload().arg("check").arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{schema}: {stderr}");
        assert!(stderr.contains(says), "{schema}: {stderr}");
    }
}
