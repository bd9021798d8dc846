// Package oci assembles container images from files, directories and
// tarballs and an image config, and writes them as archives that a container
// runtime imports (`ctr -n k8s.io images import FILE`) or that a registry
// client pushes (`crane push FILE REF`, `skopeo copy docker-archive:FILE
// docker://REF`): images without a Docker engine or a registry. It also reads
// such archives back, for tests.
//
// It builds and reads; it never pulls or pushes, and it does not know what
// goes into any particular image: the recipes live with their users
// (internal/image/mcsdimage, test/lib/images).
//
// An archive is a docker-archive (`docker save` format, written by
// go-containerregistry's tarball package) holding one image under one
// reference. Images meant to be imported, never pulled, are named under
// localhost/ (localhost/mcsd:v0.1.0), so that a node that pulls one by
// mistake fails at once instead of fetching something else.
package oci
