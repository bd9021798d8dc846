package netns

import "fmt"

// Veth connects two namespaces with a veth pair named aName in a and bName in
// b, both brought up.
func Veth(a *NS, aName string, b *NS, bName string) error {
	if _, err := a.IP("link", "add", aName, "type", "veth", "peer", "name", bName, "netns", b.Name); err != nil {
		return fmt.Errorf("connecting %s/%s to %s/%s: %w", a.Name, aName, b.Name, bName, err)
	}
	if _, err := a.IP("link", "set", aName, "up"); err != nil {
		return err
	}
	_, err := b.IP("link", "set", bName, "up")
	return err
}

// Sysctl sets a sysctl inside the namespace (net.* keys are per namespace).
func (n *NS) Sysctl(key, value string) error {
	_, err := n.Exec("sysctl", "-q", "-w", key+"="+value)
	return err
}
