//! What-if changes applied while a topology is resolved: a hardware model
//! overlay after every other, then changes to the built topology and to the
//! model it was built from. The changes themselves are their maker's
//! (`sweep::change`); this only says when they apply.

use super::resolve::{ResolveError, blueprint_with};
use super::{LinkKind, Topology, TopologyError, TopologySpec};
use crate::config::hardware::{HardwareModel, ModelSource};
use crate::network::LinkId;
use crate::units::{Bandwidth, Time};

impl Topology {
    /// Gives a link another kind, bandwidth and latency between the same
    /// ends: a what-if change of a built topology.
    pub fn set_link(&mut self, id: LinkId, kind: LinkKind, bandwidth: Bandwidth, latency: Time) {
        assert!(bandwidth.0 > 0, "link {} needs a bandwidth", self.link_label(id));
        let link = &mut self.links[id.index()];
        (link.kind, link.bandwidth, link.latency) = (kind, bandwidth, latency);
    }
}

/// A what-if change made while a topology is resolved: a hardware model
/// overlay applied after every other, then changes to the built topology
/// and to the model it was built from.
pub trait Edit {
    fn overlay(&self) -> Option<ModelSource>;
    fn built(&self, topology: &mut Topology, model: &mut HardwareModel) -> Result<(), String>;
}

/// No change: what [`super::resolve`] builds.
pub struct Unchanged;

impl Edit for Unchanged {
    fn overlay(&self) -> Option<ModelSource> {
        None
    }
    fn built(&self, _: &mut Topology, _: &mut HardwareModel) -> Result<(), String> {
        Ok(())
    }
}

/// [`super::resolve`] with `edit` applied: its overlay last, then its changes to
/// what was built.
pub fn resolve_edited(spec: &TopologySpec, edit: &dyn Edit) -> Result<(Topology, HardwareModel), ResolveError> {
    let (blueprint, mut model) = blueprint_with(spec, edit.overlay())?;
    let mut topology = blueprint.build(&model)?;
    edit.built(&mut topology, &mut model).map_err(TopologyError::Invalid)?;
    Ok((topology, model))
}
