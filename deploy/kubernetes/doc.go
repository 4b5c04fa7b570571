// Package kubernetes holds no code: its test checks the manifests in this folder by strict
// decoding into the Kubernetes API types (no cluster is needed), so a typo in a field name,
// a wrong type or a shard count that disagrees with itself fails CI instead of a deploy.
//
// This file holds only this comment: go doc and go list read a package's comment from its
// non-test files, and without one the folder would be a package with no comment.
package kubernetes
