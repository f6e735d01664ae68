//! `HandlebarsRenderer`: the built-in templates, the shell-safe helpers and the user template directory.

use std::fmt;
use std::path::{Path, PathBuf};

use handlebars::{
    Context, Handlebars, Helper, HelperDef, HelperResult, JsonRender, JsonTruthy, Output,
    PathAndJson, RenderContext, RenderError, RenderErrorReason, Renderable, ScopedJson,
};
use serde_json::Value as Json;
use slurm_core::{
    shell_quote, validate_shell_name, Error, Renderer, Result, ScriptContext, SecretRegistry,
    TemplateKind,
};

use crate::validate::validate_context;

/// The built-in `singlenode` template.
pub(crate) const SINGLENODE_TEMPLATE: &str = include_str!("../templates/singlenode.sbatch.hbs");

/// The built-in `multinode` template (a strict superset of `singlenode`).
pub(crate) const MULTINODE_TEMPLATE: &str = include_str!("../templates/multinode.sbatch.hbs");

/// The built-in `multirole` template (a multi-role job: a heterogeneous job's
/// components and steps beside them).
pub(crate) const MULTIROLE_TEMPLATE: &str = include_str!("../templates/multirole.sbatch.hbs");
/// The resume partial (`{{> resume}}`): a resumable job's signal trap, wait and requeue.
pub(crate) const RESUME_PARTIAL: &str = include_str!("../templates/resume.sh.hbs");
/// The env sidecar partial (`{{> env_sidecar}}`, in every built-in template): the
/// sidecar sourced by the batch shell and its clean-up when the run ends.
pub(crate) const ENV_SIDECAR_PARTIAL: &str = include_str!("../templates/env_sidecar.sh.hbs");

/// The file name suffix of a template in a user template directory: `<kind>.sbatch.hbs`.
pub(crate) const TEMPLATE_SUFFIX: &str = ".sbatch.hbs";

const KINDS: [TemplateKind; 3] = [
    TemplateKind::SingleNode,
    TemplateKind::MultiNode,
    TemplateKind::MultiRole,
];

/// Renders [`ScriptContext`]s with strict handlebars templates and lints the result.
///
/// Helpers available to templates (built-in and user):
/// - `{{sh value}}`: the value shell-quoted as one word; a missing or null value is an error.
///   A plain `{{value}}` is shell-quoted too (the escape function), `{{{value}}}` is raw.
/// - `{{sbatch value}}`: a value for an `#SBATCH` line, written raw; refused when empty or
///   holding whitespace or a control character.
/// - `{{sbatch_line line}}`: a whole extra `#SBATCH` argument line; refused when it holds
///   a control character (a newline would end the directive).
/// - `{{ident name}}`: a shell variable name, refused unless `[A-Za-z_][A-Za-z0-9_]*`.
/// - `(join list ",")`: the list's items joined, as a value for `sh`.
/// - `{{#if}}` / `{{#unless}}`: as usual, but naming a missing variable is an error.
pub struct HandlebarsRenderer {
    registry: Handlebars<'static>,
    /// Where each template came from, for `Debug` and errors.
    origins: [Option<PathBuf>; 3],
    /// Whether each template can run an NCCL probe's ladder (it defines `slurm_run_step`).
    runs_probes: [bool; 3],
    /// Whether each template can continue a resumable run (it calls `slurm_run_continue`).
    runs_resume: [bool; 3],
}

impl HandlebarsRenderer {
    /// A renderer with the built-in templates.
    pub fn new() -> Self {
        let mut registry = new_registry();
        for kind in KINDS {
            registry
                .register_template_string(kind.name(), builtin_source(kind))
                .expect("the built-in templates parse (checked by the tests)");
        }
        HandlebarsRenderer {
            registry,
            origins: [None, None, None],
            runs_probes: [true, true, false],
            runs_resume: [true, true, false],
        }
    }

    /// A renderer whose templates are read from `dir` where present
    /// (`singlenode.sbatch.hbs`, `multinode.sbatch.hbs`, `multirole.sbatch.hbs`), the
    /// built-in ones otherwise.
    /// The same strictness and helpers apply. Fails when `dir` is not a folder, holds
    /// neither file, or a file does not parse.
    pub fn with_template_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(Error::config(
                "template_dir",
                format!(
                    "{} is not a folder; point it at a folder holding singlenode{TEMPLATE_SUFFIX} and/or multinode{TEMPLATE_SUFFIX}",
                    dir.display()
                ),
            ));
        }
        let mut renderer = HandlebarsRenderer::new();
        for (slot, kind) in KINDS.into_iter().enumerate() {
            let path = dir.join(format!("{}{TEMPLATE_SUFFIX}", kind.name()));
            if !path.exists() {
                continue;
            }
            let source = std::fs::read_to_string(&path)
                .map_err(|e| Error::io(format!("reading template {}", path.display()), e))?;
            renderer
                .registry
                .register_template_string(kind.name(), &source)
                .map_err(|e| {
                    Error::Render(format!(
                        "template {} does not parse: {e}; fix the template",
                        path.display()
                    ))
                })?;
            renderer.runs_probes[slot] = source.contains("slurm_run_step");
            renderer.runs_resume[slot] = source.contains("slurm_run_continue");
            renderer.origins[slot] = Some(path);
        }
        if renderer.origins.iter().all(Option::is_none) {
            return Err(Error::config(
                "template_dir",
                format!(
                    "{} holds neither singlenode{TEMPLATE_SUFFIX} nor multinode{TEMPLATE_SUFFIX}; add one or drop the template folder",
                    dir.display()
                ),
            ));
        }
        Ok(renderer)
    }

    /// The file a template was read from, or `None` for the built-in one.
    pub fn template_origin(&self, kind: TemplateKind) -> Option<&Path> {
        self.origins[slot(kind)].as_deref()
    }
}

impl Default for HandlebarsRenderer {
    fn default() -> Self {
        HandlebarsRenderer::new()
    }
}

impl fmt::Debug for HandlebarsRenderer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = |kind| {
            self.template_origin(kind)
                .map_or_else(|| "built-in".to_string(), |p| p.display().to_string())
        };
        f.debug_struct("HandlebarsRenderer")
            .field("singlenode", &origin(TemplateKind::SingleNode))
            .field("multinode", &origin(TemplateKind::MultiNode))
            .field("multirole", &origin(TemplateKind::MultiRole))
            .finish()
    }
}

impl Renderer for HandlebarsRenderer {
    fn render(&self, kind: TemplateKind, context: &ScriptContext) -> Result<String> {
        validate_context(kind, context)?;
        if context.probe && !self.runs_probes[slot(kind)] {
            let origin = self
                .template_origin(kind)
                .map_or_else(|| "built-in".to_string(), |p| p.display().to_string());
            return Err(Error::Render(format!(
                "template {kind} ({origin}) cannot run the NCCL probe's ladder (it defines no slurm_run_step); copy the `probe` branch of the built-in template into it, or submit with nccl_probe: never"
            )));
        }
        if context.resume.is_some() && !self.runs_resume[slot(kind)] {
            let origin = self
                .template_origin(kind)
                .map_or_else(|| "built-in".to_string(), |p| p.display().to_string());
            return Err(Error::Render(format!(
                "template {kind} ({origin}) cannot continue a resumable run (it never calls slurm_run_continue); copy the `resume` branches of the built-in template into it (`{{{{> resume}}}}`, slurm_run_wait, slurm_run_continue), or remove the spec's resume block"
            )));
        }
        self.registry.render(kind.name(), context).map_err(|e| {
            let origin = self
                .template_origin(kind)
                .map_or_else(|| "built-in".to_string(), |p| p.display().to_string());
            Error::Render(format!(
                "template {kind} ({origin}): {}; fix the template or the context",
                describe(&e)
            ))
        })
    }

    fn lint(&self, script: &str, secrets: &SecretRegistry) -> Result<()> {
        crate::lint::lint_script(script, secrets)
    }
}

fn slot(kind: TemplateKind) -> usize {
    match kind {
        TemplateKind::SingleNode => 0,
        TemplateKind::MultiNode => 1,
        TemplateKind::MultiRole => 2,
    }
}

fn builtin_source(kind: TemplateKind) -> &'static str {
    match kind {
        TemplateKind::SingleNode => SINGLENODE_TEMPLATE,
        TemplateKind::MultiNode => MULTINODE_TEMPLATE,
        TemplateKind::MultiRole => MULTIROLE_TEMPLATE,
    }
}

/// A render error without any value: the reason, and where.
fn describe(e: &RenderError) -> String {
    let reason = match e.reason() {
        RenderErrorReason::MissingVariable(Some(path)) => {
            format!("the template names `{path}`, which the context does not have")
        }
        RenderErrorReason::MissingVariable(None) => {
            "the template names a variable the context does not have".to_string()
        }
        other => other.to_string(),
    };
    match (e.line_no, e.column_no) {
        (Some(line), Some(col)) => format!("{reason} (line {line}, column {col})"),
        _ => reason,
    }
}

fn new_registry() -> Handlebars<'static> {
    let mut registry = Handlebars::new();
    registry.set_strict_mode(true);
    // A script is not HTML: a plain `{{value}}` is shell-quoted instead. Contexts are
    // validated before rendering, so no value holds a NUL byte (the only failure).
    registry.register_escape_fn(|s| shell_quote(s).unwrap_or_else(|_| "''".to_string()));
    registry
        .register_partial("resume", RESUME_PARTIAL)
        .expect("the resume partial parses (checked by the tests)");
    registry
        .register_partial("env_sidecar", ENV_SIDECAR_PARTIAL)
        .expect("the env sidecar partial parses (checked by the tests)");
    registry.register_helper("sh", Box::new(ShHelper));
    registry.register_helper("sbatch", Box::new(SbatchHelper { whole_line: false }));
    registry.register_helper("sbatch_line", Box::new(SbatchHelper { whole_line: true }));
    registry.register_helper("ident", Box::new(IdentHelper));
    registry.register_helper("join", Box::new(JoinHelper));
    registry.register_helper("if", Box::new(StrictIf { positive: true }));
    registry.register_helper("unless", Box::new(StrictIf { positive: false }));
    registry
}

fn helper_error(message: String) -> RenderError {
    RenderErrorReason::Other(message).into()
}

/// The parameter's name as written in the template, for error messages (never its value).
fn param_name(param: &PathAndJson<'_>) -> String {
    param
        .relative_path()
        .cloned()
        .unwrap_or_else(|| "a literal".to_string())
}

/// Parameter 0 of `helper`, present, and a scalar (string, number or boolean) rendered as text.
fn scalar_param(h: &Helper<'_>, helper: &str) -> Result<(String, String), RenderError> {
    let param = h.param(0).ok_or_else(|| {
        helper_error(format!(
            "`{helper}` needs one value, e.g. {{{{{helper} job_name}}}}"
        ))
    })?;
    let name = param_name(param);
    if param.is_value_missing() {
        return Err(RenderErrorReason::MissingVariable(Some(name)).into());
    }
    match param.value() {
        Json::String(_) | Json::Number(_) | Json::Bool(_) => Ok((name, param.value().render())),
        Json::Null => Err(helper_error(format!(
            "`{helper} {name}`: {name} is not set; wrap it in {{{{#if {name}}}}}"
        ))),
        Json::Array(_) | Json::Object(_) => Err(helper_error(format!(
            "`{helper} {name}`: {name} is a list or a map, not one value"
        ))),
    }
}

/// `{{sh value}}`: one shell word.
struct ShHelper;

impl HelperDef for ShHelper {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let (name, value) = scalar_param(h, "sh")?;
        let quoted = shell_quote(&value)
            .map_err(|_| helper_error(format!("`sh {name}`: {name} holds a NUL byte")))?;
        out.write(&quoted)?;
        Ok(())
    }
}

/// `{{sbatch value}}` and `{{sbatch_line line}}`: text that cannot end an `#SBATCH` line.
struct SbatchHelper {
    whole_line: bool,
}

impl HelperDef for SbatchHelper {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let helper = if self.whole_line {
            "sbatch_line"
        } else {
            "sbatch"
        };
        let (name, value) = scalar_param(h, helper)?;
        if value.trim().is_empty() {
            return Err(helper_error(format!(
                "`{helper} {name}`: {name} is empty; an #SBATCH directive needs a value"
            )));
        }
        if value.chars().any(char::is_control) {
            return Err(helper_error(format!(
                "`{helper} {name}`: {name} holds a newline or control character, which would break out of the #SBATCH line; remove it"
            )));
        }
        if !self.whole_line && value.chars().any(char::is_whitespace) {
            return Err(helper_error(format!(
                "`{helper} {name}`: {name} holds whitespace, which sbatch would split; remove it"
            )));
        }
        out.write(&value)?;
        Ok(())
    }
}

/// `{{ident name}}`: a shell variable name.
struct IdentHelper;

impl HelperDef for IdentHelper {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let (name, value) = scalar_param(h, "ident")?;
        if validate_shell_name("ident", &value).is_err() {
            return Err(helper_error(format!(
                "`ident {name}`: not a shell variable name ([A-Za-z_][A-Za-z0-9_]*)"
            )));
        }
        out.write(&value)?;
        Ok(())
    }
}

/// `(join list sep)`: the list's scalar items joined by `sep`.
struct JoinHelper;

impl HelperDef for JoinHelper {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut RenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        let list = h
            .param(0)
            .ok_or_else(|| helper_error("`join` needs a list and a separator".to_string()))?;
        let name = param_name(list);
        if list.is_value_missing() {
            return Err(RenderErrorReason::MissingVariable(Some(name)).into());
        }
        let sep = h
            .param(1)
            .and_then(|p| p.value().as_str())
            .ok_or_else(|| helper_error(format!("`join {name}` needs a separator string")))?;
        let items = list
            .value()
            .as_array()
            .ok_or_else(|| helper_error(format!("`join {name}`: {name} is not a list")))?;
        let joined = items
            .iter()
            .map(|item| match item {
                Json::String(_) | Json::Number(_) | Json::Bool(_) => Ok(item.render()),
                _ => Err(helper_error(format!(
                    "`join {name}`: every item of {name} must be one value"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?
            .join(sep);
        Ok(ScopedJson::Derived(Json::String(joined)))
    }
}

/// `{{#if}}` / `{{#unless}}` that refuse a missing variable (the stock ones treat it as false).
struct StrictIf {
    positive: bool,
}

impl HelperDef for StrictIf {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        r: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let name = if self.positive { "if" } else { "unless" };
        let param = h.param(0).ok_or(RenderErrorReason::ParamNotFoundForIndex(
            if self.positive { "if" } else { "unless" },
            0,
        ))?;
        if param.is_value_missing() {
            return Err(RenderErrorReason::MissingVariable(Some(format!(
                "{} (in #{name})",
                param_name(param)
            )))
            .into());
        }
        let truthy = param.value().is_truthy(false) == self.positive;
        let template = if truthy { h.template() } else { h.inverse() };
        match template {
            Some(t) => t.render(r, ctx, rc, out),
            None => Ok(()),
        }
    }
}
