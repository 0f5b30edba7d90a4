//! The pod watch: each pod that is this node's, or no node's yet, to a task
//! of its own.

use super::*;

/// Watches every pod and hands each one that is this node's (or no node's
/// yet) to a task of its own, keyed by uid: a pod is run once, however often
/// the watch restarts. The tasks die with this one.
pub(super) async fn watch_pods(ctx: Arc<Ctx>) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let mut events = Box::pin(watcher(api, watcher::Config::default()).default_backoff());
    // Each known pod's latest version, for its task; `None` once it is gone.
    let mut pods: HashMap<String, watch::Sender<Option<Pod>>> = HashMap::new();
    // The uids seen since the watch (re)started its listing.
    let mut listed: HashSet<String> = HashSet::new();
    let mut tasks: JoinSet<()> = JoinSet::new();
    loop {
        tokio::select! {
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done {
                    if e.is_panic() {
                        tracing::error!(node = %ctx.node, error = %e, "a pod's task panicked");
                    }
                }
            }
            event = events.next() => match event {
                None => return,
                Some(Err(e)) => tracing::warn!(node = %ctx.node, error = %e, "pod watch failed; retrying"),
                Some(Ok(watcher::Event::Init)) => listed.clear(),
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    if let Some(uid) = pod.metadata.uid.clone() {
                        listed.insert(uid);
                    }
                    dispatch(&ctx, &mut pods, &mut tasks, pod);
                }
                Some(Ok(watcher::Event::Apply(pod))) => dispatch(&ctx, &mut pods, &mut tasks, pod),
                Some(Ok(watcher::Event::InitDone)) => {
                    // Those not listed again were deleted while unwatched.
                    pods.retain(|uid, tx| {
                        let keep = listed.contains(uid);
                        if !keep {
                            tx.send_replace(None);
                        }
                        keep
                    });
                }
                Some(Ok(watcher::Event::Delete(pod))) => {
                    if let Some(tx) = pod.metadata.uid.as_ref().and_then(|uid| pods.remove(uid)) {
                        tx.send_replace(None);
                    }
                }
            }
        }
    }
}

fn dispatch(
    ctx: &Arc<Ctx>,
    pods: &mut HashMap<String, watch::Sender<Option<Pod>>>,
    tasks: &mut JoinSet<()>,
    pod: Pod,
) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    if let Some(tx) = pods.get(&uid) {
        // Its task may have ended: the update then has no one to go to.
        tx.send_replace(Some(pod));
        return;
    }
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        None => {}
        Some(node) if node == ctx.node => {}
        Some(_) => return,
    }
    let (tx, rx) = watch::channel(Some(pod));
    pods.insert(uid, tx);
    tasks.spawn(run_pod(ctx.clone(), rx));
}
