package netfilter

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/google/nftables"
	v1 "k8s.io/api/core/v1"
)

// RuleCounter counts the rules of one chain of one nftables table without
// reading the rest of it. Once per sync period the proxier asks it about one
// base chain to notice a table flushed or deleted behind its back.
type RuleCounter interface {
	// CountRules returns how many rules chain of the family's table has. A
	// table or chain that does not exist has none, or gives an error
	// wrapping [ErrNotFound]; either makes the proxier rewrite the table.
	CountRules(family v1.IPFamily, chain string) (int, error)
}

// ErrNotFound is what a [RuleCounter] wraps when the table or chain is gone.
var ErrNotFound = errors.New("not found")

// netlinkRuleCounter asks the kernel over netlink for one chain's rules: a
// dump of that chain alone, where `nft list chain` (nft 1.0.x) reads every
// set and map of the table first, which takes seconds at 10k services.
type netlinkRuleCounter struct {
	conn  *nftables.Conn
	table string
}

// NewRuleCounter returns a RuleCounter of the chains of table (in each
// family) that talks netlink to the kernel in the network namespace of the
// calling thread; its socket stays there.
func NewRuleCounter(table string) (RuleCounter, error) {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("opening an nftables netlink socket: %w", err)
	}
	return &netlinkRuleCounter{conn: conn, table: table}, nil
}

func (c *netlinkRuleCounter) CountRules(family v1.IPFamily, chain string) (int, error) {
	tf := nftables.TableFamilyIPv4
	if family == v1.IPv6Protocol {
		tf = nftables.TableFamilyIPv6
	}
	rules, err := c.conn.GetRules(&nftables.Table{Name: c.table, Family: tf}, &nftables.Chain{Name: chain})
	if err != nil {
		// The library flattens the netlink error to text.
		if strings.Contains(err.Error(), syscall.ENOENT.Error()) {
			return 0, fmt.Errorf("chain %s of table %s: %w", chain, c.table, ErrNotFound)
		}
		return 0, fmt.Errorf("listing the rules of chain %s of table %s: %w", chain, c.table, err)
	}
	return len(rules), nil
}
