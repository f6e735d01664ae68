//! Tests of the secret scan (each rule both ways, properties) and of the `bash -n` check.

use proptest::prelude::*;
use slurm_core::{is_secret_name, ErrorKind, LintFinding, SecretRegistry};
use slurm_render::rules as rule;
use slurm_render::{check_syntax, lint_script, scan_secrets};

fn scan(text: &str) -> Vec<LintFinding> {
    scan_secrets(text, &SecretRegistry::new())
}

fn rules(text: &str) -> Vec<(String, Option<String>)> {
    scan(text)
        .into_iter()
        .map(|f| (f.rule, f.variable))
        .collect()
}

fn flagged(text: &str, rule: &str, variable: &str) {
    let found = rules(text);
    assert!(
        found
            .iter()
            .any(|(r, v)| r == rule && v.as_deref() == Some(variable)),
        "`{text}` should be flagged {rule} ({variable}); found {found:?}"
    );
}

fn passes(text: &str) {
    assert_eq!(scan(text), vec![], "`{text}` should pass");
}

#[test]
fn secret_names_are_whole_word_parts() {
    for name in [
        "HF_TOKEN",
        "NGC_API_KEY",
        "NGC_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "DB_PASSWORD",
        "passwd",
        "apiKey",
        "HFToken",
        "WANDB_APIKEY",
        "MY_CREDENTIAL",
        "client-secret",
    ] {
        assert!(is_secret_name(name), "{name}");
    }
    for name in [
        "TOKENIZERS_PARALLELISM",
        "max_new_tokens",
        "HF_HOME",
        "KEYBOARD",
        "MONKEY",
        "SECRETARY",
        "PATH",
        "NCCL_DEBUG",
        "CREDENTIALS_FILE_DIR_X",
    ] {
        assert!(!is_secret_name(name), "{name}");
    }
}

#[test]
fn secret_assignment_literal_forms_are_flagged() {
    flagged("HF_TOKEN=abc123", rule::SECRET_ASSIGNMENT, "HF_TOKEN");
    flagged(
        "export HF_TOKEN='abc123'",
        rule::SECRET_ASSIGNMENT,
        "HF_TOKEN",
    );
    flagged(
        "export HF_TOKEN=\"abc 123\"",
        rule::SECRET_ASSIGNMENT,
        "HF_TOKEN",
    );
    flagged(
        "export A=1 NGC_API_KEY=zzz",
        rule::SECRET_ASSIGNMENT,
        "NGC_API_KEY",
    );
    flagged(
        "docker run -e DB_PASSWORD=hunter2 img",
        rule::SECRET_ASSIGNMENT,
        "DB_PASSWORD",
    );
    flagged(
        "srun --export=ALL,HF_TOKEN=abc123 cmd",
        rule::SECRET_ASSIGNMENT,
        "HF_TOKEN",
    );
    flagged(
        "echo \"${HF_TOKEN:-abc123}\"",
        rule::SECRET_ASSIGNMENT,
        "HF_TOKEN",
    );
    flagged(
        "x=${WANDB_API_KEY=abc}",
        rule::SECRET_ASSIGNMENT,
        "WANDB_API_KEY",
    );
    flagged("local apiKey=xyz; run", rule::SECRET_ASSIGNMENT, "apiKey");
    flagged(
        "true && HF_TOKEN=abc cmd",
        rule::SECRET_ASSIGNMENT,
        "HF_TOKEN",
    );
}

#[test]
fn secret_references_and_empty_values_pass() {
    passes("export HF_TOKEN=$HF_TOKEN");
    passes("export HF_TOKEN=\"${HF_TOKEN}\"");
    passes("export HF_TOKEN=\"$(cat /run/secrets/hf)\"");
    passes("HF_TOKEN=");
    passes("export HF_TOKEN=''");
    passes("export HF_TOKEN=\"\"");
    passes("srun --export=ALL,HF_TOKEN cmd");
    passes("echo \"${HF_TOKEN:-}\"");
    passes("echo \"${HF_TOKEN:-$FALLBACK}\"");
    passes("export TOKENIZERS_PARALLELISM=false");
    passes("python gen.py max_new_tokens=512");
    passes("export HF_HOME=/lustre/hf");
    passes("if [ \"$HF_TOKEN\" = \"\" ]; then exit 1; fi");
}

#[test]
fn credential_flags_with_literals_are_flagged() {
    flagged(
        "tool --password hunter2",
        rule::CREDENTIAL_FLAG,
        "--password",
    );
    flagged(
        "tool --password='hunter2'",
        rule::CREDENTIAL_FLAG,
        "--password",
    );
    flagged(
        "ngc config set --api-key abcd",
        rule::CREDENTIAL_FLAG,
        "--api-key",
    );
    flagged(
        "hf auth login --token xyz",
        rule::CREDENTIAL_FLAG,
        "--token",
    );
    passes("echo \"$KEY\" | docker login --password-stdin -u me nvcr.io");
    passes("tool --password \"$DB_PASSWORD\"");
    passes("hf auth login --token \"${HF_TOKEN}\"");
    passes("tool --password --other");
}

#[test]
fn login_dash_p_is_flagged_but_port_maps_pass() {
    flagged(
        "docker login -u me -p hunter2 nvcr.io",
        rule::LOGIN_PASSWORD,
        "-p",
    );
    flagged("docker login -phunter2 nvcr.io", rule::LOGIN_PASSWORD, "-p");
    passes("docker login -u me -p \"$NGC_KEY\" nvcr.io");
    passes("docker run -p 8080:8080 img");
    passes("docker login -p 8080:8080");
    passes("mkdir -p /lustre/x # login dir");
}

#[test]
fn token_prefixes_are_flagged() {
    let cases = [
        ("echo nvapi-AbCdEfGhIjKlMnOpQrStUv", "nvapi-"),
        ("echo hf_AbCdEfGhIjKlMnOpQrStUvWxYz12", "hf_"),
        (
            "git clone https://ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789@github.com/x",
            "ghp_",
        ),
        (
            "echo github_pat_11AAAAAAA0aaaaaaaaaaaa_bbbbbbbbbb",
            "github_pat_",
        ),
        ("echo AKIAABCDEFGHIJKLMNOP", "AKIA"),
        (
            "curl -H 'Authorization: Bearer xoxb-1234567890-abcdef'",
            "xox-",
        ),
        ("echo sk-AbCdEfGhIjKlMnOpQrStUvWx", "sk-"),
    ];
    for (text, prefix) in cases {
        flagged(text, rule::TOKEN_PREFIX, prefix);
    }
    passes("python -c 'from huggingface_hub import hf_hub_download'");
    passes("echo task-manager disk-usage risk-free");
    passes("echo AKIA_IS_NOT_A_KEY");
    passes("ls /data/ghp_short");
}

#[test]
fn presigned_urls_and_url_passwords_are_flagged() {
    flagged(
        "curl 'https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKI%2F&X-Amz-Signature=abcd'",
        rule::PRESIGNED_URL,
        "X-Amz-Signature",
    );
    flagged(
        "wget 'https://h/o?x-amz-security-token=zzz'",
        rule::PRESIGNED_URL,
        "x-amz-security-token",
    );
    passes("echo X-Amz-Signature=");
    flagged(
        "git clone https://me:hunter2@git.example.com/r.git",
        rule::URL_PASSWORD,
        "https:// userinfo",
    );
    flagged(
        "DB=postgres://u:p4ss@db:5432/x",
        rule::URL_PASSWORD,
        "postgres:// userinfo",
    );
    passes("git clone https://me:$GIT_PASSWORD@git.example.com/r.git");
    passes("git clone https://me@git.example.com/r.git");
    passes("srun --container-image=docker://ubuntu:22.04@sha256:0123abcd true");
    passes("curl http://localhost:8080/health");
}

#[test]
fn json_credentials_are_flagged() {
    flagged(
        r#"echo '{"token": "abc"}' > cfg.json"#,
        rule::JSON_CREDENTIAL,
        "token",
    );
    flagged(
        r#"echo "{\"apiKey\": \"abc\"}""#,
        rule::JSON_CREDENTIAL,
        "apiKey",
    );
    flagged(
        r#"  "aws_secret_access_key":"x","#,
        rule::JSON_CREDENTIAL,
        "aws_secret_access_key",
    );
    passes(r#"echo '{"token": ""}'"#);
    passes(r#"echo '{"max_new_tokens": "512", "name": "x"}'"#);
    passes(r#"echo '{"password": "$DB_PASSWORD"}'"#);
}

#[test]
fn private_keys_and_registered_values_are_flagged_by_line() {
    let text =
        "a\nb\n-----BEGIN OPENSSH PRIVATE KEY-----\nzzz\n-----END OPENSSH PRIVATE KEY-----\n";
    let found = scan(text);
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].line, found[0].rule.as_str()),
        (3, rule::PRIVATE_KEY)
    );
    passes("-----BEGIN PUBLIC KEY-----");
    passes("-----BEGIN CERTIFICATE-----");
    let mut secrets = SecretRegistry::new();
    secrets.register("DB_PASS", "correct horse\nbattery");
    let found = scan_secrets("x\necho 'correct horse\nbattery'\n", &secrets);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].line, 2);
    assert_eq!(found[0].variable.as_deref(), Some("DB_PASS"));
    assert_eq!(scan_secrets("echo correct horse", &secrets), vec![]);
}

#[test]
fn bash_syntax_errors_name_the_line_and_not_the_text() {
    assert_eq!(check_syntax("#!/bin/bash\necho ok\n").unwrap(), vec![]);
    let found = check_syntax("#!/bin/bash\necho ok\nif then fi (\n").unwrap();
    assert!(!found.is_empty());
    assert!(found
        .iter()
        .all(|f| f.rule == rule::BASH_SYNTAX && f.variable.is_none()));
    assert_eq!(found[0].line, 3);
    let unterminated = check_syntax("echo 'hunter2-unclosed\n").unwrap();
    assert_eq!(unterminated.len(), 1);
    let err = lint_script("echo 'hunter2-unclosed\n", &SecretRegistry::new()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lint);
    assert!(err.to_string().contains("bash-syntax"), "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    // Nothing is executed: a command that would write a file does not.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let script = format!("touch '{}'\n", marker.display());
    assert_eq!(check_syntax(&script).unwrap(), vec![]);
    assert!(!marker.exists());
}

#[test]
fn lint_findings_name_line_rule_and_variable() {
    let err = lint_script(
        "#!/bin/bash\necho hi\nexport HF_TOKEN=abc123xyz\n",
        &SecretRegistry::new(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "batch script refused: line 3: secret-assignment (HF_TOKEN)"
    );
}

fn secret_name() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["", "HF_", "MY_APP_", "WANDB_", "X_"]),
        prop::sample::select(vec![
            "TOKEN",
            "SECRET",
            "PASSWORD",
            "PASSWD",
            "API_KEY",
            "APIKEY",
            "ACCESS_KEY",
            "NGC_KEY",
            "CREDENTIAL",
        ]),
        prop::sample::select(vec!["", "_VALUE", "_2"]),
    )
        .prop_map(|(a, b, c)| format!("{a}{b}{c}"))
}

fn plain_name() -> impl Strategy<Value = String> {
    "[A-Z][A-Z0-9]{0,5}(_[A-Z0-9]{1,6}){0,2}"
        .prop_filter("not secret-named", |n| !is_secret_name(n))
}

fn literal() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._/+-]{1,24}".prop_filter("not a reference", |v| !v.starts_with('$'))
}

fn form(name: &str, value: &str, which: usize) -> String {
    match which {
        0 => format!("{name}={value}"),
        1 => format!("export {name}='{value}'"),
        2 => format!("export {name}=\"{value}\""),
        3 => format!("docker run -e {name}={value} img"),
        4 => format!("srun --export=ALL,{name}={value} cmd"),
        _ => format!("echo \"${{{name}:-{value}}}\""),
    }
}

proptest! {
    #[test]
    fn any_secret_named_literal_is_flagged_without_its_value(
        name in secret_name(), value in literal(), which in 0usize..6, line in 1usize..5,
    ) {
        let text = format!("{}{}\n", "echo x\n".repeat(line - 1), form(&name, &value, which));
        let found = scan(&text);
        prop_assert!(
            found.iter().any(|f| f.line == line && f.rule == rule::SECRET_ASSIGNMENT && f.variable.as_deref() == Some(name.as_str())),
            "{text:?}: {found:?}"
        );
        let err = lint_script(&text, &SecretRegistry::new()).unwrap_err().to_string();
        if value.len() >= 6 {
            prop_assert!(!err.contains(&value), "{err}");
        }
    }

    #[test]
    fn secret_named_references_pass(name in secret_name(), other in plain_name(), which in 0usize..6, braces in any::<bool>()) {
        let reference = if braces { format!("${{{other}}}") } else { format!("${other}") };
        let text = form(&name, &reference, which);
        prop_assert_eq!(scan(&text), vec![], "{}", text);
    }

    #[test]
    fn plain_names_with_literals_pass(name in plain_name(), value in "[a-z0-9./]{1,12}", which in 0usize..6) {
        let text = form(&name, &value, which);
        prop_assert_eq!(scan(&text), vec![], "{}", text);
    }

    #[test]
    fn scan_never_panics(text in "\\PC{0,200}") {
        let _ = scan(&text);
    }

    #[test]
    fn registered_values_are_found_wherever_they_sit(
        prefix in "[ -~]{0,30}", value in "[A-Za-z0-9]{8,20}", suffix in "[ -~]{0,30}",
    ) {
        let mut secrets = SecretRegistry::new();
        secrets.register("S", value.clone());
        let found = scan_secrets(&format!("{prefix}{value}{suffix}"), &secrets);
        prop_assert!(found.iter().any(|f| f.rule == rule::REGISTERED_SECRET && f.variable.as_deref() == Some("S")));
    }
}
