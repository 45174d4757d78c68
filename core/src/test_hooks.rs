//! Points where the integration tests hold the server, compiled only with the `test-hooks`
//! feature: the crate's own dev-dependency turns it on for test builds, and a build of the
//! binary for use never has it (there is no setting or environment variable that reaches it).
//!
//! [`hold_worker`]: the invocation worker stops just before its last check that a released
//! call is still the one granted, so a test can change the tool upstream in between. Holds are
//! per tenant, so tests running side by side in one process do not hold each other's workers.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use tokio::sync::watch;

struct Gate {
    /// `true` while held.
    held: watch::Sender<bool>,
    /// How many invocations reached the gate.
    arrived: watch::Sender<u32>,
}

static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The worker of `tenant` held until [`WorkerHold::release`] (or until this is dropped).
pub struct WorkerHold {
    tenant: String,
    gate: Arc<Gate>,
}

/// Holds every worker's execution of `tenant`'s released invocations at the gate.
pub fn hold_worker(tenant: &str) -> WorkerHold {
    let gate = Arc::new(Gate {
        held: watch::Sender::new(true),
        arrived: watch::Sender::new(0),
    });
    crate::sync::lock(&GATES).insert(tenant.to_owned(), gate.clone());
    WorkerHold {
        tenant: tenant.to_owned(),
        gate,
    }
}

impl WorkerHold {
    /// Waits until `n` invocations have reached the gate.
    pub async fn arrived(&self, n: u32) {
        let mut arrived = self.gate.arrived.subscribe();
        let _ = arrived.wait_for(|a| *a >= n).await;
    }

    /// Lets what waits at the gate (and what comes later) go on.
    pub fn release(&self) {
        self.gate.held.send_replace(false);
    }
}

impl Drop for WorkerHold {
    fn drop(&mut self) {
        self.release();
        let mut gates = crate::sync::lock(&GATES);
        if gates
            .get(&self.tenant)
            .is_some_and(|g| Arc::ptr_eq(g, &self.gate))
        {
            gates.remove(&self.tenant);
        }
    }
}

/// Where the worker waits while a test holds `tenant`'s worker.
pub(crate) async fn worker_gate(tenant: &str) {
    let gate = crate::sync::lock(&GATES).get(tenant).cloned();
    if let Some(gate) = gate {
        gate.arrived.send_modify(|n| *n += 1);
        let mut held = gate.held.subscribe();
        let _ = held.wait_for(|h| !*h).await;
    }
}
