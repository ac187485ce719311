//! Providers' conventions, against the simulator playing them over loopback: Azure OpenAI's
//! deployment URLs (`/openai/deployments/NAME/chat/completions?api-version=…`) and its `api-key`
//! header, the key never kept.

mod common;

use common::{run_file, SimProcess};

/// The simulator as an Azure OpenAI resource: every deployment route wants `api-version` and
/// the key (from `AZURE_KEY_FOR_SIM`, set for it alone).
fn azure_sim(dir: &std::path::Path) -> SimProcess {
    let profile = dir.join("azure.kdl");
    std::fs::write(
        &profile,
        "sim { ttft \"5ms\"; itl \"1ms\"; api-key env=\"AZURE_KEY_FOR_SIM\" }\n",
    )
    .unwrap();
    SimProcess::start_with_env(
        &["--profile", profile.to_str().unwrap()],
        &[("AZURE_KEY_FOR_SIM", "azure-secret-key-0123456789")],
    )
}

fn plan(target: &str) -> String {
    format!(
        "plan \"azure\" {{ seed 3 }}\n\
         target \"{target}\" {{ api \"chat\"; model \"gpt-4o\"; header \"api-key\" env=\"AZURE_OPENAI_API_KEY\" }}\n\
         workload {{ input 32; output 8 }}\n\
         phase \"p\" {{ concurrency 2; requests 6 }}\n"
    )
}

#[test]
fn an_azure_deployment_is_reached_with_its_api_version_and_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let sim = azure_sim(dir.path());
    let origin = sim.url.trim_end_matches("/v1");
    let deployment = format!("{origin}/openai/deployments/gpt-4o");
    let key = std::ffi::OsStr::new("azure-secret-key-0123456789");
    let run = |name: &str, target: &str, key: Option<&std::ffi::OsStr>| {
        let path = dir.path().join(format!("{name}.kdl"));
        std::fs::write(&path, plan(target)).unwrap();
        let env: Vec<(&str, &std::ffi::OsStr)> = key
            .map(|k| ("AZURE_OPENAI_API_KEY", k))
            .into_iter()
            .collect();
        let out = dir.path().join(name);
        let ran = run_file(&path, &out, &[], &env);
        (
            ran.status.code(),
            String::from_utf8_lossy(&ran.stderr).into_owned(),
            out,
        )
    };

    // The deployment's URL as the portal gives it: each endpoint under it, the query kept.
    let versioned = format!("{deployment}?api-version=2024-10-21");
    let (code, said, out) = run("ok", &versioned, Some(key));
    assert_eq!(code, Some(0), "{said}");
    let records = common::read_records(&out);
    assert_eq!(records.len(), 6);
    assert!(
        records.iter().all(|r| r["http_status"] == 200),
        "{records:?}"
    );
    // The key is in no file of the run.
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read(&path).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        assert!(!text.contains("azure-secret-key"), "{}", path.display());
    }

    // Without its api-version the resource is not found, and the run says so.
    let (code, said, _) = run("unversioned", &deployment, Some(key));
    assert_eq!(code, Some(3), "{said}");
    assert!(said.contains("api-version"), "{said}");

    // Without the key, every request is refused.
    let (code, said, out) = run("keyless", &versioned, None);
    assert_eq!(code, Some(3), "{said}");
    let records = common::read_records(&out);
    assert!(
        records.iter().all(|r| r["http_status"] == 401),
        "{records:?}"
    );
}
