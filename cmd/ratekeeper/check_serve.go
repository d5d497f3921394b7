package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/ratekeeper/ratekeeper/internal/yamlconf"
	"github.com/ratekeeper/ratekeeper/rls"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// isServeConfig reports whether path is ratekeeper serve's: a directory,
// or a file whose top level names a domain or descriptors.
func isServeConfig(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	if fi.IsDir() {
		return true
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) > yamlconf.MaxFileSize {
		return false
	}
	keys := yamlconf.TopKeys(b)
	return slices.Contains(keys, "domain") || slices.Contains(keys, "descriptors")
}

// checkServe is check for serve's descriptor files: the store the
// environment gives serve (asked whether it answers with connect), then
// the files, their limits and warnings.
func checkServe(ctx context.Context, path string, connect bool, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var store storeconfig.Config
	storeconfig.RegisterFlags(fs, &store)
	env, err := applyEnv(fs, os.LookupEnv, os.Environ())
	if err != nil {
		return err
	}
	store.Password = storePassword(fs, env, os.LookupEnv)
	var errs []error
	if err := store.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("store, from the environment (%s): %w", envList(env), err))
	} else if connect {
		if err := connectStore(ctx, store); err != nil {
			errs = append(errs, err)
		}
	}
	c, err := rls.Load(path)
	if err == nil {
		_, err = rls.Compile(c)
	}
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		for _, e := range errs {
			printErrors(stderr, e)
		}
		return errInvalid
	}
	for _, w := range c.Warnings() {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	fmt.Fprintf(stdout, "%s: valid: descriptor files of ratekeeper serve (docs/envoy.md)\n", path)
	printConnected(stdout, connect, store)
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "store:      %s (ratekeeper serve's --store flags and their RATEKEEPER_* variables)\n", store)
	for _, d := range c.Domains {
		fmt.Fprintf(stdout, "\ndomain %s (%s):\n", d.Domain, d.File)
		printDescriptors(stdout, d.Descriptors, "  ")
	}
	return nil
}

// printDescriptors prints each descriptor's key=value and its limit,
// nested ones indented below it.
func printDescriptors(w io.Writer, ds []rls.DescriptorConfig, indent string) {
	for _, d := range ds {
		kv := d.Key
		if d.Value != "" {
			kv += "=" + d.Value
		}
		fmt.Fprintf(w, "%s%s: %s\n", indent, kv, describeRateLimit(d))
		printDescriptors(w, d.Descriptors, indent+"  ")
	}
}

// describeRateLimit says what a descriptor's rate_limit does.
func describeRateLimit(d rls.DescriptorConfig) string {
	r := d.RateLimit
	var s string
	switch {
	case r == nil && len(d.Descriptors) > 0:
		return "no limit of its own"
	case r == nil:
		return "no limit"
	case r.Unlimited:
		s = "unlimited"
	case r.RequestsPerUnit == 0:
		s = "refuses every request"
	default:
		alg := r.Algorithm
		if alg == "" {
			alg = "fixed_window"
		}
		s = fmt.Sprintf("%d per %s, %s", r.RequestsPerUnit, strings.ToLower(r.Unit), alg)
		if r.Burst > 0 {
			s += fmt.Sprintf(" (burst %d)", r.Burst)
		}
	}
	if r.Name != "" {
		s += ", named " + r.Name
	}
	if d.ShadowMode {
		s += ", shadow mode"
	}
	if d.QuotaMode {
		s += ", quota mode (OVER_LIMIT in its status, the request passes)"
	}
	return s
}
