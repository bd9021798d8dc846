package proxier

// trafficPolicy decides which of a service port's endpoints receive new
// connections on this node. README.md explains the choices.
type trafficPolicy struct {
	// localCluster is this node's cluster ID.
	localCluster string
	// nodeName is this node's name; empty when the embedder did not say.
	nodeName string
	// preferLocalCluster applies PreferClose to every service.
	preferLocalCluster bool
}

// choice is the outcome for one service port: the endpoints to balance
// over, or, when there are none, the verdict for its traffic.
type choice struct {
	endpoints []endpoint
	// dropped is set when internalTrafficPolicy Local leaves no endpoint
	// although there are some elsewhere: the traffic is dropped. Without
	// endpoints and without dropped, there are none anywhere: it is
	// rejected.
	dropped bool
}

// choose picks the endpoints of svc's port among eps (all endpoints of the
// clusters that serve the port).
//
//   - Ready endpoints are used; only when none are ready anywhere are the
//     serving-and-terminating ones used, so that connections still work
//     while a service drains.
//   - internalTrafficPolicy Local: only local endpoints (this cluster, and
//     this node when the node name is known), with the same ready/terminating
//     fallback among them; no fallback to other endpoints: traffic is
//     dropped instead, as kube-proxy does.
//   - PreferClose (per service, or for all with preferLocalCluster): the
//     usable endpoints of this cluster when there are any, else all usable
//     ones.
func (pol trafficPolicy) choose(svc *serviceInfo, eps []endpoint) choice {
	usable := readyOrTerminating(eps, func(endpoint) bool { return true })
	if svc.internalLocal {
		local := readyOrTerminating(eps, pol.isLocal)
		return choice{endpoints: local, dropped: len(local) == 0 && len(usable) > 0}
	}
	if svc.preferClose || pol.preferLocalCluster {
		var close []endpoint
		for _, e := range usable {
			if e.cluster == pol.localCluster {
				close = append(close, e)
			}
		}
		if len(close) > 0 {
			return choice{endpoints: close}
		}
	}
	return choice{endpoints: usable}
}

// isLocal says whether an endpoint counts as local for
// internalTrafficPolicy Local.
func (pol trafficPolicy) isLocal(e endpoint) bool {
	if e.cluster != pol.localCluster {
		return false
	}
	return pol.nodeName == "" || e.nodeName == pol.nodeName
}

// readyOrTerminating returns the ready endpoints among those that keep
// returns true, or if there are none, the serving and terminating ones.
func readyOrTerminating(eps []endpoint, keep func(endpoint) bool) []endpoint {
	ready := make([]endpoint, 0, len(eps))
	var terminating []endpoint
	for _, e := range eps {
		if !keep(e) {
			continue
		}
		switch {
		case e.ready:
			ready = append(ready, e)
		case e.serving && e.terminating:
			terminating = append(terminating, e)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return terminating
}
