package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Every flag of every command can also be set by an environment variable:
// RATEKEEPER_ and the flag's name in capitals, dashes as underscores
// (--store-timeout is RATEKEEPER_STORE_TIMEOUT). A flag on the command line
// wins over its variable, and the variable over the config file. That is
// the order a container platform needs: the image's command line is fixed,
// the environment is the deployment's, and the file is shared.

// envPrefix starts every variable of a flag.
const envPrefix = "RATEKEEPER_"

// passwordEnv is Redis's password: a variable only, never a flag, so that
// it does not show in the process list.
const passwordEnv = envPrefix + "STORE_PASSWORD"

// envName is the variable of the flag named name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// fromEnv is what the environment set on a command's flags.
type fromEnv struct {
	// set maps each flag set by its variable to the variable.
	set map[string]string
	// unknown are the RATEKEEPER_ variables that name no flag of the
	// command (a misspelling, or another command's flag).
	unknown []string
}

// parseFlags parses args into fs, then sets each flag not on the command
// line from its variable, if that is set (lookup is os.LookupEnv, environ
// os.Environ). A variable whose value the flag refuses is a usage error
// that names the variable. Flags set either way are fs.Visit's.
func parseFlags(fs *flag.FlagSet, args []string, lookup func(string) (string, bool), environ []string) (fromEnv, error) {
	if err := fs.Parse(args); err != nil {
		return fromEnv{}, err
	}
	return applyEnv(fs, lookup, environ)
}

// applyEnv sets fs's flags not set yet from their variables.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool), environ []string) (fromEnv, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	env := fromEnv{set: map[string]string{}}
	known := map[string]bool{passwordEnv: true}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		known[name] = true
		v, ok := lookup(name)
		if !ok || given[f.Name] || err != nil {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = usageError{fmt.Errorf("%s=%q: %v", name, v, e)}
			return
		}
		env.set[f.Name] = name
	})
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) && !known[name] {
			env.unknown = append(env.unknown, name)
		}
	}
	sort.Strings(env.unknown)
	return env, err
}

// osEnv parses args into fs with the process's environment.
func osEnv(fs *flag.FlagSet, args []string) (fromEnv, error) {
	return parseFlags(fs, args, os.LookupEnv, os.Environ())
}
