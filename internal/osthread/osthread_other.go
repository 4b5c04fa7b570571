//go:build !linux

// Package osthread is Linux-only (osthread_linux.go); elsewhere it is empty.
package osthread
