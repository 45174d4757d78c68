//! `notifications/resources/updated`: an upstream's word that a resource changed, handed by
//! the node whose connection heard it to every node (an event on the bus, [`EVENT`]), and by
//! each node to its listening streams whose holder subscribed to that resource
//! ([`crate::store::subscriptions`]) — decided again at delivery: the holder's token must still
//! authenticate as the principal that subscribed, and the policy active now must still let that
//! principal read the resource in the environment it subscribed in, offered by the same
//! upstream. What it may no longer read, it no longer hears of.
//!
//! A node subscribes its own connection to an upstream resource when a client subscribes
//! through it, and ends that subscription when the last one of every node is gone: at once on
//! the node that handles the last `resources/unsubscribe`, else when an update arrives that
//! nobody holds a subscription to any more.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::{self, error::RecvError};

use super::listing::{META_SUBSCRIPTION, Watch, Watchers};
use crate::events::{Bus, Event};
use crate::items::{Exposure, Route};
use crate::store::{self, Store, subscriptions::SubscriptionRow};
use crate::upstream::{ResourceUpdated, Upstreams};

/// The bus event: subject the upstream id, `data.uri` the URI as the upstream sent it.
pub const EVENT: &str = "resource.updated";

/// Hands the updates this node's connections hear (`heard`) to every node through `bus`, until
/// the task is dropped (spawned by the server). An update nobody is subscribed to ends this
/// node's subscription to it upstream instead.
pub async fn relay(
    mut heard: broadcast::Receiver<ResourceUpdated>,
    store: Store,
    upstreams: Arc<Upstreams>,
    bus: Arc<Bus>,
) {
    loop {
        let update = match heard.recv().await {
            Ok(update) => update,
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "resource updates were missed");
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let held = store::subscriptions::to_resource(
            &store,
            &update.tenant_id,
            &update.upstream_id,
            &update.uri,
        )
        .await;
        match held {
            Ok(rows) if rows.is_empty() => {
                crate::items::release_if_unheld(
                    &store,
                    &upstreams,
                    &update.tenant_id,
                    &update.upstream_id,
                    &update.uri,
                )
                .await;
            }
            Ok(_) => {
                bus.publish(
                    &update.tenant_id,
                    EVENT,
                    &update.upstream_id,
                    "",
                    json!({"uri": update.uri}),
                )
                .await;
            }
            Err(e) => tracing::debug!(error = %e, "reading who subscribed to a resource"),
        }
    }
}

/// Delivers every node's updates (`events`) to this node's listening streams, until the task
/// is dropped (spawned by the server).
pub async fn deliver(
    mut events: broadcast::Receiver<Event>,
    store: Store,
    watchers: Arc<Watchers>,
) {
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            // Updates are hints: one missed is a change the client learns of at its next read.
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        if event.kind != EVENT {
            continue;
        }
        let Some(raw_uri) = event.data.get("uri").and_then(Value::as_str) else {
            continue;
        };
        let watches = watchers.of_tenant(&event.tenant_id);
        if watches.is_empty() {
            continue;
        }
        let rows = match store::subscriptions::to_resource(
            &store,
            &event.tenant_id,
            &event.subject,
            raw_uri,
        )
        .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "reading who subscribed to a resource");
                continue;
            }
        };
        for watch in &watches {
            let holder = watch.holder();
            for row in rows.iter().filter(|r| r.holder == holder) {
                if still_readable(&store, watch, row).await {
                    watch.log().push(&updated(&row.uri, watch));
                }
            }
        }
    }
}

/// Whether `watch`'s caller is still the principal that subscribed (`row`) and may still read
/// the resource, from the same upstream, in the environment it subscribed in.
async fn still_readable(store: &Store, watch: &Watch, row: &SubscriptionRow) -> bool {
    let owner = watch.log().owner();
    let caller = crate::principal::authenticate_bearer(store, &watch.listener().secret)
        .await
        .ok()
        .filter(|p| {
            p.tenant_id == owner.tenant_id
                && p.actor_id == owner.actor_id
                && p.principal_id() == row.principal
        });
    let Some(caller) = caller else {
        return false;
    };
    let Ok(exposure) = Exposure::load(store, &caller, &row.environment).await else {
        return false;
    };
    matches!(
        exposure.route_read(&row.uri),
        Route::Allowed { upstream_id, raw, .. }
            if upstream_id == row.upstream_id && raw == row.raw_uri
    )
}

/// The notification for `uri` on `watch`'s stream (tagged with its subscription in
/// 2026-07-28).
fn updated(uri: &str, watch: &Watch) -> Value {
    let mut params = json!({"uri": uri});
    if let Some(id) = &watch.listener().subscription_id {
        params["_meta"] = json!({META_SUBSCRIPTION: id});
    }
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": params,
    })
}
