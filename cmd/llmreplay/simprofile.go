package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/sim"
)

// simSource returns the profile sim starts from, before its flags: the profile file
// --profile-file names, else the built-in --profile names; label says which, for the
// banner and a saved profile's description.
func simSource(fs *pflag.FlagSet, profile, profileFile string) (p sim.ProfileFile, label string, err error) {
	if profileFile == "" {
		if p, err = sim.BuiltinProfile(profile); err != nil {
			return p, "", usagef("sim: --profile: %v", err)
		}
		return p, "profile " + profile, nil
	}
	if fs.Changed("profile") {
		return p, "", usagef("sim: --profile %s and --profile-file %s both name the engine's parameters: give one", profile, profileFile)
	}
	if p, err = sim.ReadProfileFile(profileFile); err != nil {
		return p, "", usagef("sim: --profile-file: %v", err)
	}
	return p, fmt.Sprintf("profile %s from %s", p.Name, profileFile), nil
}

// notModelFlags are sim's flags that shape the serving, not the engine: they are no part
// of a saved profile.
var notModelFlags = map[string]bool{"addr": true, "profile": true, "profile-file": true, "save-profile": true, "print-info": true}

// saveSimProfile writes cfg, src with every flag given applied, as a profile file at path,
// named by the file's base name. Its description says what it came from and which flags
// changed it; src's fit is kept only when no flag changed the configuration it describes.
func saveSimProfile(fs *pflag.FlagSet, path string, src sim.ProfileFile, label string, cfg sim.Config, stderr io.Writer) error {
	if cfg.RequestLog != "" {
		return usagef("sim: --save-profile with --request-log: a profile names no request log (give --request-log when serving the profile)")
	}
	var flags []string
	fs.Visit(func(f *pflag.Flag) {
		if notModelFlags[f.Name] {
			return
		}
		if f.Value.Type() == "bool" {
			flags = append(flags, "--"+f.Name)
			return
		}
		vals := []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			vals = sv.GetSlice()
		}
		for _, v := range vals {
			if v == "" || strings.ContainsAny(v, " \t\"'") {
				v = strconv.Quote(v)
			}
			flags = append(flags, "--"+f.Name+" "+v)
		}
	})
	out := sim.ProfileFile{
		Name:        strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)),
		Description: src.Description,
		Config:      cfg,
		Fit:         src.Fit,
	}
	if len(flags) > 0 {
		out.Description = fmt.Sprintf("From %s with %s (llmreplay sim --save-profile).", label, strings.Join(flags, " "))
		out.Fit = nil
	}
	if err := sim.WriteProfileFile(path, out); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "llmreplay sim: wrote profile %s to %s; serve it with llmreplay sim --profile-file %s\n", out.Name, path, path)
	return nil
}
