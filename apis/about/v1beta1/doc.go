// Package v1beta1 is the v1beta1 version of the about.k8s.io API (KEP-2149): the
// cluster-scoped ClusterProperty, which holds facts about a cluster such as
// its ID (cluster.clusterset.k8s.io) and its ClusterSet (clusterset.k8s.io).
//
// +k8s:deepcopy-gen=package
// +groupName=about.k8s.io
package v1beta1
