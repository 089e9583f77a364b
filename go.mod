module github.com/fleetmq/fleetmq

go 1.26.8

require github.com/coder/websocket v1.8.14 // indirect
