package main

// pluginEnvVars are the FLEDGE_* variables a plugin process gets on top of the policy's
// minimal environment. Each points at something the plugin may actually reach:
//
//   - FLEDGE_PLUGIN_DIR: its installed dir, readable (read+execute) by the plugin, so
//     multi-file plugins find their helpers and data files as under the Rust fledge host,
//     which sets it for every plugin. Read-only here: state belongs in FLEDGE_DATA_DIR.
//   - FLEDGE_DATA_DIR: its private data dir, the one place it may write.
//   - FLEDGE_PLUGIN, FLEDGE_COMMAND, FLEDGE_VERSION: who it is, what it was run as, and
//     which fledge runs it.
//   - FLEDGE_NON_INTERACTIVE=1 when fledge runs with --ni (the variable the Rust fledge host
//     reads for the same mode), so a plugin can skip questions nobody will answer.
//
// Empty values are left out (a legacy plugin has no command name of its own).
func pluginEnvVars(name, command, pluginDir, dataDir string, nonInteractive bool) map[string]string {
	vars := map[string]string{
		"FLEDGE_PLUGIN":     name,
		"FLEDGE_COMMAND":    command,
		"FLEDGE_PLUGIN_DIR": pluginDir,
		"FLEDGE_DATA_DIR":   dataDir,
		"FLEDGE_VERSION":    version,
	}
	if nonInteractive {
		vars["FLEDGE_NON_INTERACTIVE"] = "1"
	}
	for k, v := range vars {
		if v == "" {
			delete(vars, k)
		}
	}
	return vars
}
