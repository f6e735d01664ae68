//! The lint a batch script must pass before submit: a secret scan (never reporting values) and `bash -n`.
//!
//! The rules, and what each finds, are listed with their names in [`crate::rules`].

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;
use slurm_core::{Error, LintFinding, Result, SecretRegistry};

/// Rule: a value registered as a secret appears in the script.
pub const REGISTERED_SECRET: &str = "registered-secret";
/// Rule: a private key block.
pub const PRIVATE_KEY: &str = "private-key";
/// Rule: a secret-named variable given a literal value.
pub const SECRET_ASSIGNMENT: &str = "secret-assignment";
/// Rule: a credential flag given a literal value.
pub const CREDENTIAL_FLAG: &str = "credential-flag";
/// Rule: `-p VALUE` on a login line.
pub const LOGIN_PASSWORD: &str = "login-password";
/// Rule: a known token prefix.
pub const TOKEN_PREFIX: &str = "token-prefix";
/// Rule: presigned URL parameters.
pub const PRESIGNED_URL: &str = "presigned-url";
/// Rule: a password in URL userinfo.
pub const URL_PASSWORD: &str = "url-password";
/// Rule: a secret-named JSON key with a value.
pub const JSON_CREDENTIAL: &str = "json-credential";
/// Rule: `bash -n` refused the script.
pub const BASH_SYNTAX: &str = "bash-syntax";

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("the lint's regexes are valid")
}

static PRIVATE_KEY_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"));
/// `NAME=` preceded by the start, whitespace or a shell/list separator.
static ASSIGNMENT_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r#"(?:^|[\s;,'"(&|`])([A-Za-z_][A-Za-z0-9_]*)="#));
static DEFAULT_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?[-=]([^}]*)\}"));
static FLAG_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?:^|[\s;])(--password|--passwd|--token|--api-key|--apikey|--secret)(?:=|\s+)(\S+)")
});
static LOGIN_RE: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)\blogin\b"));
static LOGIN_P_RE: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|\s)-p(?:=|\s+)?(\S+)"));
static PORT_MAP_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^[0-9.]*:?[0-9]+(?::[0-9]+)?(?:/(?:tcp|udp))?$"));
static TOKEN_RES: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    vec![
        ("nvapi-", re(r"\bnvapi-[A-Za-z0-9_-]{16,}")),
        ("hf_", re(r"\bhf_[A-Za-z0-9]{20,}")),
        ("ghp_", re(r"\bghp_[A-Za-z0-9]{20,}")),
        ("github_pat_", re(r"\bgithub_pat_[A-Za-z0-9_]{20,}")),
        ("AKIA", re(r"\bAKIA[0-9A-Z]{16}\b")),
        ("xox-", re(r"\bxox[baprs]-[A-Za-z0-9-]{10,}")),
        ("sk-", re(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ]
});
static PRESIGNED_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|X-Goog-Signature|X-Goog-Credential)=([^&\s'\x22]*)",
    )
});
static URL_USERINFO_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r#"\b([A-Za-z][A-Za-z0-9+.-]*)://([^/\s:@'"]*):([^/\s@'"]*)@(\S*)"#));
static JSON_KEY_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r#"\\?"([A-Za-z_][A-Za-z0-9_.-]*)\\?"\s*:\s*\\?"([^"\\]*)"#));
static BASH_LINE_RE: LazyLock<Regex> = LazyLock::new(|| re(r"line ([0-9]+):"));

use slurm_core::is_secret_name;

/// The value starting at the beginning of `rest` (right after `=`), unquoted.
fn value_after(rest: &str) -> &str {
    if let Some(inner) = rest.strip_prefix('\'') {
        return inner.split('\'').next().unwrap_or("");
    }
    if let Some(inner) = rest.strip_prefix('"') {
        let mut escaped = false;
        for (i, c) in inner.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => return &inner[..i],
                _ => escaped = false,
            }
        }
        return inner;
    }
    let end = rest
        .find(|c: char| c.is_whitespace() || ";,&|)}'\"`".contains(c))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// Whether an (unquoted) value is a literal: non-empty and not a reference or substitution.
fn is_literal(value: &str) -> bool {
    let value = value.trim().trim_matches(|c| c == '\'' || c == '"');
    !value.is_empty() && !value.starts_with('$') && !value.starts_with('`')
}

/// Collects findings without duplicates, ordered by line.
#[derive(Default)]
struct Findings(BTreeSet<(usize, &'static str, Option<String>)>);

impl Findings {
    fn add(&mut self, line: usize, rule: &'static str, variable: Option<String>) {
        self.0.insert((line, rule, variable));
    }

    fn into_vec(self) -> Vec<LintFinding> {
        self.0
            .into_iter()
            .map(|(line, rule, variable)| LintFinding {
                line,
                rule: rule.to_string(),
                variable,
            })
            .collect()
    }
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Scan `script` for secrets: the values in `secrets` and the literal-credential rules
/// listed in [`crate::rules`]. Findings name the line, the rule and the variable, never a value.
pub fn scan_secrets(script: &str, secrets: &SecretRegistry) -> Vec<LintFinding> {
    let mut found = Findings::default();
    for (name, value) in secrets.entries() {
        for (offset, _) in script.match_indices(value) {
            found.add(
                line_of(script, offset),
                REGISTERED_SECRET,
                Some(name.to_string()),
            );
        }
    }
    for m in PRIVATE_KEY_RE.find_iter(script) {
        found.add(line_of(script, m.start()), PRIVATE_KEY, None);
    }
    for (index, line) in script.lines().enumerate() {
        scan_line(index + 1, line, &mut found);
    }
    found.into_vec()
}

fn scan_line(n: usize, line: &str, found: &mut Findings) {
    if line.contains('=') {
        for caps in ASSIGNMENT_RE.captures_iter(line) {
            let name = &caps[1];
            let rest = &line[caps.get(0).map_or(0, |m| m.end())..];
            if is_secret_name(name) && is_literal(value_after(rest)) {
                found.add(n, SECRET_ASSIGNMENT, Some(name.to_string()));
            }
        }
    }
    if line.contains("${") {
        for caps in DEFAULT_RE.captures_iter(line) {
            if is_secret_name(&caps[1]) && is_literal(&caps[2]) {
                found.add(n, SECRET_ASSIGNMENT, Some(caps[1].to_string()));
            }
        }
    }
    if line.contains("--") {
        for caps in FLAG_RE.captures_iter(line) {
            let value = &caps[2];
            if is_literal(value) && !value.starts_with('-') {
                found.add(n, CREDENTIAL_FLAG, Some(caps[1].to_string()));
            }
        }
    }
    if let Some(login) = LOGIN_RE.find(line) {
        // Only a `-p` after the `login` word (`docker login -u me -p …`), not `mkdir -p … login`.
        for caps in LOGIN_P_RE.captures_iter(&line[login.end()..]) {
            let value = caps[1].trim_matches(|c| c == '\'' || c == '"');
            if is_literal(value) && !value.starts_with('-') && !PORT_MAP_RE.is_match(value) {
                found.add(n, LOGIN_PASSWORD, Some("-p".to_string()));
            }
        }
    }
    for (prefix, regex) in TOKEN_RES.iter() {
        if regex.is_match(line) {
            found.add(n, TOKEN_PREFIX, Some((*prefix).to_string()));
        }
    }
    for caps in PRESIGNED_RE.captures_iter(line) {
        if is_literal(&caps[2]) {
            found.add(n, PRESIGNED_URL, Some(caps[1].to_string()));
        }
    }
    if line.contains("://") {
        for caps in URL_USERINFO_RE.captures_iter(line) {
            let password = &caps[3];
            let after = &caps[4];
            let digest = after.starts_with("sha256:") || after.starts_with("sha512:");
            if is_literal(password) && !digest {
                found.add(n, URL_PASSWORD, Some(format!("{}:// userinfo", &caps[1])));
            }
        }
    }
    if line.contains('"') {
        for caps in JSON_KEY_RE.captures_iter(line) {
            if is_secret_name(&caps[1]) && is_literal(&caps[2]) {
                found.add(n, JSON_CREDENTIAL, Some(caps[1].to_string()));
            }
        }
    }
}

/// Run `bash -n` on `script` (given on standard input; nothing is executed; the process
/// is started ahead, see `syntax.rs`) and return one [`BASH_SYNTAX`] finding per line it
/// complains about. Bash's message is not kept
/// (it can quote script text). Fails only when bash cannot be started.
pub fn check_syntax(script: &str) -> Result<Vec<LintFinding>> {
    let output = crate::syntax::bash_n(script)?;
    if output.status.success() {
        return Ok(Vec::new());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mut found = Findings::default();
    for caps in BASH_LINE_RE.captures_iter(&stderr) {
        if let Ok(line) = caps[1].parse() {
            found.add(line, BASH_SYNTAX, None);
        }
    }
    if found.0.is_empty() {
        found.add(script.lines().count().max(1), BASH_SYNTAX, None);
    }
    Ok(found.into_vec())
}

/// The full lint: [`scan_secrets`] and [`check_syntax`]. `Ok(())` or [`Error::Lint`]
/// listing every finding as `line N: rule (variable)`.
pub fn lint_script(script: &str, secrets: &SecretRegistry) -> Result<()> {
    let mut findings = scan_secrets(script, secrets);
    findings.extend(check_syntax(script)?);
    if findings.is_empty() {
        return Ok(());
    }
    findings.sort_by_key(|f| f.line);
    Err(Error::Lint {
        findings: findings.iter().map(ToString::to_string).collect(),
    })
}
