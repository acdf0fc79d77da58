module github.com/jobengine/jobengine/sdk/go

go 1.19
