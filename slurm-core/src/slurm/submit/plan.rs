//! A submit's plan, computed once before anything is rendered or sent: the partitions,
//! the resources (defaults applied, the partitions' limits checked), the image and its
//! conversion, the array, the nodes to avoid, and (filled by the flow) the NCCL knobs,
//! the probe the job waits for and its `--dependency`. Pure: every later step reads it.

use crate::nccl::KnobSet;
use crate::record::{JobId, JobRecord};
use crate::retry::check_exclusions;
use crate::slurm::config::SlurmConfig;
use crate::slurm::facts::ClusterFacts;
use crate::slurm::images::{container_image, Conversion, PlannedImage};
use crate::slurm::parse::expand_nodelist;
use crate::slurm::paths::job_dir;
use crate::spec::normalise_sbatch_line;
use crate::spec::{ArrayPlan, JobSpec, Limits, ResolvedRole, Resources, SpecDefaults};
use crate::storage::RemotePath;
use crate::{Error, Result};

/// Everything a submit decided before it renders.
#[derive(Debug, Clone)]
pub(crate) struct SubmitPlan {
    /// The spec (with the submit's own `after` merged in).
    pub(crate) spec: JobSpec,
    /// The record id, also the SLURM job name.
    pub(crate) id: JobId,
    /// The results root on the cluster.
    pub(crate) root: RemotePath,
    /// The job's folder under it.
    pub(crate) job_dir: RemotePath,
    /// What the job asks of the scheduler.
    pub(crate) resources: Resources,
    /// Its container image, if any.
    pub(crate) image: Option<PlannedImage>,
    /// Its array of tasks, if any.
    pub(crate) array: Option<ArrayPlan>,
    /// The nodes to keep it off (a retry's inherited node faults).
    pub(crate) exclude: Vec<String>,
    /// The record this submit retries.
    pub(crate) retry_of: Option<JobRecord>,
    /// Whether the script sources a secrets sidecar.
    pub(crate) sidecar: bool,
    /// The cluster's cached NCCL knobs, added to the extra env after the spec's own.
    pub(crate) knobs: KnobSet,
    /// The NCCL probe the job waits for (and whose knobs it exports).
    pub(crate) probe: Option<JobRecord>,
    /// The `--dependency` value: the parents still running, the probe and the image's
    /// conversion.
    pub(crate) dependency: Option<String>,
    /// A multi-role job's roles (roles on their own nodes first: the heterogeneous
    /// job's components, in order), each with its image; empty for a single job.
    pub(crate) roles: Vec<PlannedRole>,
    /// What the NCCL probe checks of a multi-role job: its multi-GPU role with the most
    /// GPUs, as a single job (`None`: the job itself, or no such role).
    pub(crate) nccl_view: Option<(JobSpec, Resources)>,
    /// The job's code tree, once on the cluster.
    pub(crate) code: Option<super::code::StagedCode>,
    /// The cluster's Slurm release (slurmctld's), noted in the record.
    pub(crate) release: Option<String>,
    /// The job converting the image first (the job waits for it), when it must be.
    pub(crate) conversion_job: Option<JobRecord>,
}

/// One role of a multi-role job as planned: resolved against the partitions' limits,
/// with its container image (converted before anything is queued).
#[derive(Debug, Clone)]
pub(crate) struct PlannedRole {
    pub(crate) role: ResolvedRole,
    pub(crate) image: Option<PlannedImage>,
}

/// `spec`'s resources with the backend's defaults and the limits of `partitions`.
pub(crate) fn resources_of(
    spec: &JobSpec,
    partitions: &[String],
    config: &SlurmConfig,
    facts: &ClusterFacts,
) -> Result<Resources> {
    let limits = Limits {
        max_wall: facts.max_wall(partitions),
        ..Limits::default()
    };
    let mut defaults = SpecDefaults {
        limits,
        ..SpecDefaults::default()
    }
    .with_partition(config.partition.clone());
    if let Some(account) = &config.account {
        defaults = defaults.with_account(account.clone());
    }
    spec.resolve(&defaults)
}

/// The nodes the spec's `extra_sbatch` entries exclude (`--exclude=n[1-2]`, `-x n3`).
fn user_exclusions(spec: &JobSpec) -> Result<Vec<String>> {
    let mut nodes = Vec::new();
    for line in &spec.extra_sbatch {
        if let Some(list) = normalise_sbatch_line(line)?.strip_prefix("--exclude=") {
            nodes.extend(expand_nodelist(list).map_err(|e| {
                Error::invalid(
                    "extra_sbatch",
                    format!("`{line}`: {e}; write --exclude=n1,n[3-4]"),
                )
            })?);
        }
    }
    Ok(nodes)
}

/// The nodes a retry of `retry_of` avoids, and those the spec's own `--exclude` entries
/// name: one list, written once (an entry of its own would replace the computed one).
fn excluded_nodes(spec: &JobSpec, retry_of: Option<&JobRecord>) -> Result<Vec<String>> {
    let mut exclude = retry_of
        .map(JobRecord::nodes_to_exclude)
        .unwrap_or_default();
    for node in user_exclusions(spec)? {
        if !exclude.contains(&node) {
            exclude.push(node);
        }
    }
    Ok(exclude)
}

/// sbatch refuses `--oversubscribe` with `--exclusive` (fatal from Slurm 23.02), and
/// slurm-run writes `--exclusive` for a job of whole nodes (8 GPUs a node).
fn refuse_oversubscribe(spec: &JobSpec, exclusive: bool) -> Result<()> {
    let mut lines = Vec::new();
    for line in &spec.extra_sbatch {
        lines.push(normalise_sbatch_line(line)?);
    }
    let own_exclusive = lines
        .iter()
        .any(|l| l == "--exclusive" || l.starts_with("--exclusive="));
    if (exclusive || own_exclusive) && lines.iter().any(|l| l == "--oversubscribe") {
        return Err(Error::invalid(
            "extra_sbatch",
            "--oversubscribe cannot go with --exclusive (slurm-run writes it for a job of whole nodes, 8 GPUs a node; sbatch refuses the pair from Slurm 23.02); remove --oversubscribe",
        ));
    }
    Ok(())
}

/// The spec's `extra_sbatch` entries as the script writes them: normalised, without the
/// `--exclude` entries (merged into the plan's exclusions).
pub(crate) fn extra_sbatch_lines(spec: &JobSpec) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for line in &spec.extra_sbatch {
        let line = normalise_sbatch_line(line)?;
        if !line.starts_with("--exclude=") {
            lines.push(line);
        }
    }
    Ok(lines)
}

impl SubmitPlan {
    /// The plan of `spec` (validated) under the results root `root`, as the retry of
    /// `retry_of` when given; `sidecar` when secrets are staged. A retry whose inherited
    /// node exclusions leave too few nodes is refused here.
    pub(crate) fn new(
        spec: JobSpec,
        root: RemotePath,
        retry_of: Option<JobRecord>,
        sidecar: bool,
        config: &SlurmConfig,
        facts: &ClusterFacts,
    ) -> Result<Self> {
        let roles = plan_roles(&spec, &root, config, facts)?;
        let nccl_view = nccl_view(&spec, &roles);
        let (resources, image, partitions) = match roles.first() {
            // A multi-role job: the scheduler's view of the whole (the nodes it takes,
            // for the exclusions), its images per role.
            Some(first) => {
                let mut whole = first.role.resources.clone();
                whole.nodes = roles
                    .iter()
                    .filter(|r| r.role.on.is_none())
                    .map(|r| r.role.resources.nodes)
                    .sum();
                whole.gpus = roles.iter().map(|r| r.role.resources.gpus).sum();
                let partitions = config.partitions_for(
                    &spec
                        .role_as_job(&first.role.name)
                        .unwrap_or_else(|| spec.clone()),
                );
                (whole, None, partitions)
            }
            None => {
                let partitions = config.partitions_for(&spec);
                let resources = resources_of(&spec, &partitions, config, facts)?;
                let image = container_image(&spec, &root, resources.gpus, facts.pyxis())?;
                (resources, image, partitions)
            }
        };
        let array = spec.array_plan()?;
        let exclude = excluded_nodes(&spec, retry_of.as_ref())?;
        refuse_oversubscribe(&spec, resources.exclusive)?;
        check_exclusions(
            resources.nodes,
            &exclude,
            facts.nodes_of(&partitions).as_deref(),
            &partitions.join(","),
            retry_of.as_ref().map(|r| &r.id),
        )?;
        let id = JobId::mint_for(&spec);
        let job_dir = job_dir(&root, &id)?;
        Ok(SubmitPlan {
            spec,
            id,
            root,
            job_dir,
            resources,
            image,
            array,
            exclude,
            retry_of,
            sidecar,
            knobs: KnobSet::new(),
            probe: None,
            dependency: None,
            roles,
            nccl_view,
            code: None,
            release: facts
                .release()
                .and_then(|r| r.running())
                .map(|r| r.to_string()),
            conversion_job: None,
        })
    }

    /// The conversion the image needs before the job is queued, if any.
    pub(crate) fn conversion(&self) -> Option<&Conversion> {
        self.image.as_ref().and_then(|i| i.conversion.as_ref())
    }

    /// Every conversion the job needs before it is queued: its image's, or each role's
    /// (an image two roles share once).
    pub(crate) fn conversions(&self) -> Vec<&Conversion> {
        let mut all: Vec<&Conversion> = self.conversion().into_iter().collect();
        for role in &self.roles {
            if let Some(conversion) = role.image.as_ref().and_then(|i| i.conversion.as_ref()) {
                if !all.iter().any(|c| c.path == conversion.path) {
                    all.push(conversion);
                }
            }
        }
        all
    }

    /// The spec and resources the NCCL probe decides on: the job's, or a multi-role
    /// job's multi-GPU role with the most GPUs.
    pub(crate) fn nccl_shape(&self) -> (&JobSpec, &Resources) {
        match &self.nccl_view {
            Some((spec, resources)) => (spec, resources),
            None => (&self.spec, &self.resources),
        }
    }
}

/// The roles of a multi-role `spec` (none for a single job), each resolved with the
/// defaults and its partitions' limits, and its image planned; errors name the role.
fn plan_roles(
    spec: &JobSpec,
    root: &RemotePath,
    config: &SlurmConfig,
    facts: &ClusterFacts,
) -> Result<Vec<PlannedRole>> {
    if !spec.is_multi_role() {
        return Ok(Vec::new());
    }
    let in_role = |name: &str, error: crate::Error| match error {
        crate::Error::Invalid { field, message } if !field.starts_with("roles.") => {
            crate::Error::invalid(format!("roles.{name}.{field}"), message)
        }
        other => other,
    };
    let mut planned = Vec::new();
    for role in spec.resolve_roles(&SpecDefaults::default())? {
        let view = spec
            .role_as_job(&role.name)
            .expect("a resolved role is a role of the spec");
        let partitions = config.partitions_for(&view);
        let resources =
            resources_of(&view, &partitions, config, facts).map_err(|e| in_role(&role.name, e))?;
        let image = container_image(&view, root, resources.gpus, facts.pyxis())
            .map_err(|e| in_role(&role.name, e))?;
        let mut role = role;
        if role.on.is_none() {
            role.resources = resources;
        } else {
            role.resources.wall = resources.wall;
            role.resources.child_timeout_secs = resources.child_timeout_secs;
        }
        planned.push(PlannedRole { role, image });
    }
    Ok(planned)
}

/// The multi-GPU role with the most GPUs, as a single job, for the NCCL probe.
fn nccl_view(spec: &JobSpec, roles: &[PlannedRole]) -> Option<(JobSpec, Resources)> {
    let role = roles
        .iter()
        .filter(|r| r.role.on.is_none() && r.role.resources.gpus > 1)
        .max_by_key(|r| r.role.resources.gpus)?;
    Some((
        spec.role_as_job(&role.role.name)?,
        role.role.resources.clone(),
    ))
}
