module github.com/fleetmq/fleetmq

go 1.26.8

require (
	github.com/coder/websocket v1.8.14
	github.com/eclipse/paho.golang v0.23.0
	github.com/eclipse/paho.mqtt.golang v1.5.1
	github.com/mattn/go-sqlite3 v1.14.53
	golang.org/x/crypto v0.57.0
)

require (
	github.com/gorilla/websocket v1.5.3 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.17.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
