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
use crate::slurm::paths::job_dir;
use crate::spec::{ArrayPlan, JobSpec, Limits, Resources, SpecDefaults};
use crate::storage::RemotePath;
use crate::Result;

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
    /// The `--dependency` value: the parents still running, and the probe.
    pub(crate) dependency: Option<String>,
    /// The job's code tree, once on the cluster.
    pub(crate) code: Option<super::code::StagedCode>,
    /// The cluster's Slurm release (slurmctld's), noted in the record.
    pub(crate) release: Option<String>,
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
        let partitions = config.partitions_for(&spec);
        let resources = resources_of(&spec, &partitions, config, facts)?;
        let image = container_image(&spec, &root, resources.gpus, facts.pyxis())?;
        let array = spec.array_plan()?;
        let exclude = retry_of
            .as_ref()
            .map(JobRecord::nodes_to_exclude)
            .unwrap_or_default();
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
            code: None,
            release: facts
                .release()
                .and_then(|r| r.running())
                .map(|r| r.to_string()),
        })
    }

    /// The conversion the image needs before the job is queued, if any.
    pub(crate) fn conversion(&self) -> Option<&Conversion> {
        self.image.as_ref().and_then(|i| i.conversion.as_ref())
    }
}
