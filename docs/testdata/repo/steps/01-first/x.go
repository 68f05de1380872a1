package main

import "github.com/containerd/ttrpc"

var _ ttrpc.Server
