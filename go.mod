module github.com/ratekeeper/ratekeeper

go 1.25.0
