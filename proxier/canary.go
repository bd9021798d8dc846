package proxier

import (
	"errors"

	"sigs.k8s.io/knftables"
)

// tableIntact reports whether the table still holds what the last sync
// wrote, judged by one base chain: someone who flushed or deleted the table
// (an operator, a firewall reload) took its jump to the services chain with
// it. Partial syncs trust the state kept in memory and would never notice,
// so once per sync period the proxier looks at that one chain (through a
// RuleCounter, a netlink dump of the chain alone, on a real host) and
// rewrites the whole table when it is gone.
//
// It looks at the kernel, but only at one chain: the ruleset is never listed.
func (p *Proxier) tableIntact() bool {
	n, err := p.ruleCounter.CountRules(p.family, natPreroutingChain)
	switch {
	case knftables.IsNotFound(err), errors.Is(err, ErrNotFound):
		p.logger.Info("The nftables table or its base chain was deleted behind the proxier's back; rewriting it", "chain", natPreroutingChain)
		return false
	case err != nil:
		// nft itself failing is reported by the next transaction.
		p.logger.V(2).Info("Could not check the nftables table", "err", err)
		return true
	case n == 0:
		p.logger.Info("The nftables table was flushed behind the proxier's back; rewriting it", "chain", natPreroutingChain)
		return false
	}
	return true
}
