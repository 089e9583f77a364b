module github.com/fleetmq/fleetmq

go 1.26.8
