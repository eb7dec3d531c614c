// Package deploy holds the files a node is set up with, as the release
// ships them: the systemd units of pullguard serve and the kubelet's drop-in
// (systemd/), and the kubelet settings serve needs (kubelet/). pullguard
// install writes them from here, so the files in this directory are the one
// source of truth for the packages and the command.
package deploy

import "embed"

// Files holds systemd/* and kubelet/*, by those paths.
//
//go:embed systemd kubelet
var Files embed.FS
