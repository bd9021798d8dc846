package nsenter

import (
	"context"

	"sigs.k8s.io/knftables"
)

// NFTables is a knftables.Interface whose every call runs inside a network
// namespace: knftables runs the nft binary, and a process started from a
// thread switched into a namespace inherits it, so the table it programs is
// that namespace's.
type NFTables struct {
	path string
	knftables.Interface
}

var _ knftables.Interface = (*NFTables)(nil)

// NewNFTables returns the nftables interface of table in family, inside the
// network namespace at path (empty: the caller's own).
func NewNFTables(path string, family knftables.Family, table string) (*NFTables, error) {
	n := &NFTables{path: path}
	err := Do(path, func() (err error) {
		n.Interface, err = knftables.New(family, table)
		return err
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

func (n *NFTables) Run(ctx context.Context, tx *knftables.Transaction) error {
	return Do(n.path, func() error { return n.Interface.Run(ctx, tx) })
}

func (n *NFTables) Check(ctx context.Context, tx *knftables.Transaction) error {
	return Do(n.path, func() error { return n.Interface.Check(ctx, tx) })
}

func (n *NFTables) ListAll(ctx context.Context) (result map[string][]string, err error) {
	err = Do(n.path, func() error { result, err = n.Interface.ListAll(ctx); return err })
	return result, err
}

func (n *NFTables) List(ctx context.Context, objectType string) (result []string, err error) {
	err = Do(n.path, func() error { result, err = n.Interface.List(ctx, objectType); return err })
	return result, err
}

func (n *NFTables) ListRules(ctx context.Context, chain string) (result []*knftables.Rule, err error) {
	err = Do(n.path, func() error { result, err = n.Interface.ListRules(ctx, chain); return err })
	return result, err
}

func (n *NFTables) ListElements(ctx context.Context, objectType, name string) (result []*knftables.Element, err error) {
	err = Do(n.path, func() error { result, err = n.Interface.ListElements(ctx, objectType, name); return err })
	return result, err
}

func (n *NFTables) ListCounters(ctx context.Context) (result []*knftables.Counter, err error) {
	err = Do(n.path, func() error { result, err = n.Interface.ListCounters(ctx); return err })
	return result, err
}
