package mcsslice

import (
	"encoding/json"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ServicePortsAnnotation is the annotation on an MCS EndpointSlice that says
// which port NUMBER the slice's source cluster exports under each port name.
//
// An MCS EndpointSlice's ports[] carry the service port's name and protocol
// and, in port, the endpoints' target port; nothing in the EndpointSlice API
// says which Service port number that target port serves. The proxier needs
// it: a ServiceImport port (name, protocol, port) is served only by the
// clusters whose exported Service has that name on that same number, so a
// cluster exporting the same name on another number gets none of its traffic.
//
// The value is a JSON object from "<port name>/<protocol>" to the exported
// Service's port number, for example {"http/TCP":80,"dns/UDP":53}; see
// [ServicePorts]. The importer writes it on every slice it creates. A slice
// without it is taken to serve every port it names, whatever the number.
const ServicePortsAnnotation = "mcsd.io/service-ports"

// ServicePorts is the decoded value of [ServicePortsAnnotation]: the exported
// Service's port number for each "<name>/<protocol>" key.
type ServicePorts map[string]int32

// ServicePortKey is the key of a port in [ServicePorts]: "<name>/<protocol>".
// An empty protocol means TCP, as in the Service API; an unnamed port (a
// Service with a single port) has the key "/TCP".
func ServicePortKey(name string, protocol v1.Protocol) string {
	if protocol == "" {
		protocol = v1.ProtocolTCP
	}
	return name + "/" + string(protocol)
}

// Add records that the exporting cluster serves the named port on number port.
func (p ServicePorts) Add(name string, protocol v1.Protocol, port int32) {
	p[ServicePortKey(name, protocol)] = port
}

// Lookup returns the number the exporting cluster serves the named port on.
func (p ServicePorts) Lookup(name string, protocol v1.Protocol) (int32, bool) {
	port, ok := p[ServicePortKey(name, protocol)]
	return port, ok
}

// Encode returns the annotation value. Keys are sorted, so equal port sets
// encode to equal strings and an unchanged slice is not rewritten.
func (p ServicePorts) Encode() string {
	if p == nil {
		p = ServicePorts{}
	}
	b, err := json.Marshal(map[string]int32(p))
	if err != nil {
		// A map of strings to integers always marshals.
		panic(fmt.Sprintf("encoding %s: %v", ServicePortsAnnotation, err))
	}
	return string(b)
}

// DecodeServicePorts parses an annotation value written by [ServicePorts.Encode]
// (or by hand), checking every key and port number.
func DecodeServicePorts(value string) (ServicePorts, error) {
	var p ServicePorts
	if err := json.Unmarshal([]byte(value), &p); err != nil {
		return nil, fmt.Errorf("annotation %s is not a JSON object of port numbers: %w", ServicePortsAnnotation, err)
	}
	for key, port := range p {
		i := strings.LastIndexByte(key, '/')
		if i < 0 {
			return nil, fmt.Errorf("annotation %s: key %q is not \"<name>/<protocol>\"", ServicePortsAnnotation, key)
		}
		switch v1.Protocol(key[i+1:]) {
		case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			return nil, fmt.Errorf("annotation %s: key %q has protocol %q, want TCP, UDP or SCTP", ServicePortsAnnotation, key, key[i+1:])
		}
		if port < 1 || port > 65535 {
			return nil, fmt.Errorf("annotation %s: port %q is %d, want 1-65535", ServicePortsAnnotation, key, port)
		}
	}
	if p == nil {
		p = ServicePorts{}
	}
	return p, nil
}
