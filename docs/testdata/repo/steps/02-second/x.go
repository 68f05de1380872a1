package main

import "golang.org/x/sys/unix"

var _ = unix.Getpid
