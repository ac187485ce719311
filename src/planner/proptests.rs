//! Property tests: whatever text a plan holds, the parser answers with a plan or with
//! diagnostics, never a panic; and a plan it accepts compiles (which is why they live with the
//! planner: the plan's own tests reach no later stage).
//!
//! `cargo test` runs a bounded number of cases; `PROPTEST_CASES=100000 cargo test --release
//! proptests` runs many more (docs/ARCHITECTURE.md).

use proptest::prelude::*;

use crate::plan::{parse_plan, Load, Plan};

const PLANS: [&str; 3] = [
    include_str!("../../plans/chat-sla.kdl"),
    include_str!("../../plans/quickstart.kdl"),
    include_str!("../../plans/mixed-input.kdl"),
];

/// Pieces of plans, to splice into plans: valid tokens in the wrong places, numbers at and past
/// every bound, broken syntax.
const PIECES: [&str; 40] = [
    "{",
    "}",
    ";",
    "\n",
    "\"",
    "#\"",
    "\"#",
    "//",
    "/*",
    "*/",
    "/-",
    "\\\n",
    "=",
    " ",
    "phase \"x\" { rate 1; duration \"1s\" }",
    "at-once 4000000000",
    "rate 1e-300",
    "rate 1e308",
    "(h)1e300",
    "\"99999999999999999999h\"",
    "cv=1e308",
    "-1",
    "0",
    "18446744073709551616",
    "#inf",
    "#nan",
    "#-inf",
    "#null",
    "#true",
    "p99",
    "<",
    "<=\"1s\"",
    "phase=\"nope\"",
    "requests 9999999999",
    "concurrency 100001",
    "\u{1F600}",
    "é",
    "\t",
    "2m",
    "\"1%\"",
];

fn mutate(text: &str, edits: &[(u8, usize, usize)]) -> String {
    let mut text: Vec<char> = text.chars().collect();
    for &(kind, at, what) in edits {
        let at = if text.is_empty() {
            0
        } else {
            at % (text.len() + 1)
        };
        match kind % 4 {
            0 => {
                let end = (at + what % 40).min(text.len());
                text.drain(at..end);
            }
            1 => {
                let piece = PIECES[what % PIECES.len()];
                text.splice(at..at, piece.chars());
            }
            2 => {
                // Duplicate a stretch (a repeated block or line).
                let end = (at + what % 80).min(text.len());
                let copy: Vec<char> = text[at..end].to_vec();
                text.splice(end..end, copy);
            }
            _ => {
                if at < text.len() {
                    text[at] = PIECES[what % PIECES.len()].chars().next().unwrap_or(' ');
                }
            }
        }
    }
    text.into_iter().collect()
}

/// Parses `text`: a plan, or diagnostics that render; a plan whose schedule is small enough to
/// build here compiles.
fn check(text: String) -> Result<(), TestCaseError> {
    match parse_plan("p.kdl", text) {
        Ok(plan) => {
            if small(&plan) {
                let compiled = crate::planner::compile(&plan, plan.seed);
                prop_assert!(
                    compiled.is_ok(),
                    "check accepted a plan that does not compile"
                );
            }
        }
        Err(errors) => {
            prop_assert!(!errors.diagnostics.is_empty() || errors.message.is_some());
            let rendered = errors.render();
            prop_assert!(rendered.contains("problem") || rendered.contains("error"));
        }
    }
    Ok(())
}

/// Few enough requests to compile in a test.
fn small(plan: &Plan) -> bool {
    plan.phases.iter().all(|p| match &p.load {
        Load::Rate { rate, .. } => {
            p.duration.map_or(1e12, |d| d.as_secs_f64()) * rate.mean() < 1e5
                || p.max_requests.is_some_and(|n| n < 100_000)
        }
        Load::AtOnce(n) => *n < 100_000,
        Load::Trace(_) | Load::Sessions(_) => true,
        Load::Concurrency(_) => p.max_requests.is_none_or(|n| n < 100_000),
    })
}

proptest! {
    #[test]
    fn arbitrary_text_gives_a_plan_or_diagnostics(text in "\\PC{0,400}") {
        check(text)?;
    }

    #[test]
    fn kdl_shaped_text_gives_a_plan_or_diagnostics(
        pieces in proptest::collection::vec(0..PIECES.len(), 0..60)
    ) {
        check(pieces.iter().map(|&i| PIECES[i]).collect())?;
    }

    #[test]
    fn formatting_is_idempotent_and_keeps_the_meaning(
        plan in 0..PLANS.len(),
        edits in proptest::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 0..6)
    ) {
        let text = mutate(PLANS[plan], &edits);
        // `format` itself refuses to change a file's meaning; here, once formatted, a file
        // stays as it is, and it parses to the same plan (or the same mistakes).
        if let Ok(formatted) = crate::plan::fmt::format(&text) {
            prop_assert_eq!(crate::plan::fmt::format(&formatted).ok(), Some(formatted.clone()));
            let before = parse_plan("p.kdl", text).map(|p| format!("{:?}", (p.phases, p.sla, p.workload.buckets)));
            let after = parse_plan("p.kdl", formatted).map(|p| format!("{:?}", (p.phases, p.sla, p.workload.buckets)));
            prop_assert_eq!(before.ok(), after.ok());
        }
    }

    #[test]
    fn formatting_any_nesting_or_token_length_answers_and_never_crashes(
        depth in 0usize..3000,
        long in 0usize..200_000,
        pieces in proptest::collection::vec(0..PIECES.len(), 0..20)
    ) {
        // Deep blocks, one very long name and string, and stray pieces: fmt answers (a
        // formatted file or a reason), within the stack, and so does check.
        let mut text = String::from("a ");
        text.push_str(&"{ b ".repeat(depth));
        text.push_str(&"}".repeat(depth));
        text.push_str(&format!("\n{} \"{}\"\n", "n".repeat(long.min(5000) + 1), "x".repeat(long)));
        text.extend(pieces.iter().map(|&i| PIECES[i]));
        let _ = crate::plan::fmt::format(&text);
        check(text)?;
    }

    #[test]
    fn mutated_example_plans_give_a_plan_or_diagnostics(
        plan in 0..PLANS.len(),
        edits in proptest::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..6)
    ) {
        check(mutate(PLANS[plan], &edits))?;
    }
}
