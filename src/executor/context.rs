//! What the phases and their requests share while a run goes: the run's [`Context`] (transport,
//! templates, prompts, the recorder's channel, the pacing timer), each running phase's
//! [`PhaseState`], and the in-flight counts, entered and left only through an
//! [`InFlightTicket`]. It holds no logic of its own: the drivers are in [`super::phase`], a
//! request's life in [`super::send`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::observe::LiveCounters;
use super::recorder::Message;
use super::template::RequestTemplate;
use super::{resources, transport, Observer};
use crate::planner::{PromptSource, Schedule};
use crate::records::LogLine;
use crate::timer::PreciseTimer;

/// Requests in flight, and a way to wait until there are none.
#[derive(Default)]
pub(super) struct InFlight {
    count: AtomicUsize,
    drained: Notify,
}

impl InFlight {
    fn enter(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }
    /// Only [`InFlightTicket`]'s drop leaves: every entry is paired with its leave by the
    /// compiler, not by hand.
    fn leave(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.drained.notify_waiters();
        }
    }
    pub(super) fn is_empty(&self) -> bool {
        self.count.load(Ordering::SeqCst) == 0
    }
    pub(super) async fn wait_empty(&self) {
        loop {
            let notified = self.drained.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

pub(super) struct Context {
    /// Serves the requests' images when they go out as URLs (`image-urls`).
    pub(super) media_host: Option<super::media_host::MediaHost>,
    pub(super) transport: Arc<transport::Transport>,
    pub(super) template: RequestTemplate,
    pub(super) phase_templates: std::collections::BTreeMap<usize, RequestTemplate>,
    /// Every connection the client opened.
    pub(super) connects: Arc<transport::ConnectLog>,
    pub(super) warm_connections: bool,
    pub(super) prompts: Arc<dyn PromptSource>,
    pub(super) schedule: Arc<Schedule>,
    pub(super) run_start: Instant,
    pub(super) records: std::sync::mpsc::Sender<Message>,
    /// Room in the recorder's queue: a finished request waits for it before handing over.
    pub(super) record_room: Arc<super::recorder::QueueRoom>,
    pub(super) records_path: PathBuf,
    pub(super) observer: Arc<dyn Observer>,
    pub(super) abort: watch::Receiver<bool>,
    /// The run's stop handle: a target that does not serve the API's route refuses the run.
    pub(super) stop: super::observe::Stop,
    /// Every request in flight, whatever its phase.
    pub(super) in_flight: InFlight,
    /// What observers may poll.
    pub(super) live: Arc<LiveCounters>,
    /// Open-loop sends are paced on it: tokio's 1 ms timer would add up to 1 ms of lag.
    pub(super) timer: PreciseTimer,
    pub(super) cpu: Option<resources::CpuMonitor>,
    /// The client's own stalls, measured apart from any request.
    pub(super) hiccups: Option<super::hiccups::HiccupMeter>,
    /// The run's secrets, kept out of what a server says back outside a request (a refused
    /// cache reset).
    pub(super) secrets: Arc<crate::secrets::Secrets>,
    /// The run's TLS configuration, for the calls made beside the transport (a cache reset).
    pub(super) tls: crate::tls::Trust,
    /// Holds requests to the key's budgets (`limits`), across the run's phases.
    pub(super) pacer: Option<super::pacer::Pacer>,
}

impl Context {
    /// `request`'s prompt (of phase `phase`), its images put up where they go out as URLs;
    /// and the bytes so put up.
    pub(super) fn prompt_of(
        &self,
        phase: usize,
        request: &crate::planner::ScheduledRequest,
    ) -> (crate::planner::Prompt, u64) {
        let mut prompt = self.prompts.prompt(request);
        let served = self
            .media_host
            .as_ref()
            .map_or(0, |host| host.publish(phase, request.seq, &mut prompt));
        (prompt, served)
    }

    /// How the requests of phase `phase` are spoken: its own model or endpoint, or the run's.
    pub(super) fn template(&self, phase: usize) -> &RequestTemplate {
        self.phase_templates.get(&phase).unwrap_or(&self.template)
    }

    pub(super) fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.run_start).as_micros() as u64
    }

    pub(super) fn log(&self, line: LogLine) {
        let _ = self.records.send(Message::Line(Box::new(line)));
    }

    /// Counts a request (or a conversation) of `state`'s phase in flight, in the run's count
    /// and the phase's, until the ticket is dropped.
    pub(super) fn enter(self: &Arc<Self>, state: &Arc<PhaseState>) -> InFlightTicket {
        self.in_flight.enter();
        state.in_flight.enter();
        InFlightTicket {
            context: self.clone(),
            state: state.clone(),
        }
    }
}

/// One request (or conversation) in flight: it counts in the run's and its phase's in-flight
/// counts from [`Context::enter`] until it is dropped, however its task ends (a panic
/// included), so that a run never waits for a request that is gone.
pub(super) struct InFlightTicket {
    /// The run's context.
    pub context: Arc<Context>,
    /// The request's phase.
    pub state: Arc<PhaseState>,
}

impl Drop for InFlightTicket {
    fn drop(&mut self) {
        self.state.in_flight.leave();
        self.context.in_flight.leave();
    }
}

/// One running phase, as its requests see it.
pub(super) struct PhaseState {
    /// The phase's index in the run.
    pub index: usize,
    /// Requests sent.
    pub sent: AtomicU64,
    /// Its requests in flight.
    pub in_flight: InFlight,
    /// Set (with the reason) when the phase was ended early: its requests in flight are then
    /// cancelled.
    pub ended: watch::Receiver<Option<String>>,
}

/// Waits until the phase is ended early; never returns otherwise (nor once its control is
/// gone).
pub(super) async fn ended_early(ended: &mut watch::Receiver<Option<String>>) {
    if ended.wait_for(|reason| reason.is_some()).await.is_err() {
        std::future::pending::<()>().await;
    }
}
