//! The drain step: an instance asked to drain, and the `AskedDrain` Event
//! that says why.

use crate::scheduler::{draft::StatusDraft, snapshot::*};

/// Asks `instance` to drain, saying `why`.
pub(in crate::scheduler) fn ask_drain(d: &mut StatusDraft, instance: &InstanceView, why: &str) {
    d.act(Action::AskDrain {
        instance: instance.id(),
    });
    drain_asked(d, instance, why);
}

/// `instance` was asked to drain, for `why`.
pub(in crate::scheduler) fn drain_asked(d: &mut StatusDraft, instance: &InstanceView, why: &str) {
    d.event(Event::normal(
        "AskedDrain",
        format!(
            "asked instance {} ({}, {}) to drain: {why}",
            instance.id(),
            instance.host(),
            instance.image()
        ),
    ));
}
