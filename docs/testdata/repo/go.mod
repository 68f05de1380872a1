module example.com/fixture

go 1.26.0

require (
	github.com/containerd/ttrpc v1.2.10
	golang.org/x/sys v0.50.0 // indirect
)
