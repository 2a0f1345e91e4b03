package daemon_test

import (
	"testing"

	"mpsteer/internal/policy"
)

// cgroup on a policy and mptcpize: bad input names the key and says what
// is valid; nothing is applied.
func TestAppScopeConfigErrorsNameTheKey(t *testing.T) {
	cases := map[string]string{
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: /system.slice/backup.service}]":                                                                    "",
		"policies:\n  - {name: backup, paths: [10.2.0.1], cgroup: /a}\n  - {name: backup, paths: [10.2.0.1], cgroup: /b}\n  - {name: backup, paths: [10.1.0.1]}": "",
		"mptcpize: [/system.slice/videocall.service, /user.slice/user-1000.slice]":                                                                               "",
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: system.slice/x}]":                                                                                  `c.yaml:1: policies[0].cgroup: "system.slice/x" is not absolute`,
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: /}]":                                                                                               `policies[0].cgroup: / is every process on the host`,
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: /a/../b}]":                                                                                         `policies[0].cgroup: "/a/../b" is not a clean path (write /b)`,
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: [/a]}]":                                                                                            `policies[0].cgroup: must be a single value, not a list`,
		"policies:\n  - {name: backup, paths: [10.2.0.1], cgroup: /a}\n  - {name: backup, paths: [10.2.0.1], cgroup: /a}":                                        `c.yaml:3: policies[1].name: policy "backup@/a" is listed twice`,
		"policies: [{name: spread, cgroup: /a}]":                                                                                                                 `policies[0].cgroup: spread steers the packets of every connection`,
		"mptcpize: [system.slice/x]":                                                                                                                             `c.yaml:1: mptcpize[0]: "system.slice/x" is not absolute`,
		"mptcpize: [/a, /a]":                                                                                                                                     `mptcpize[1]: /a is listed twice`,
		"mptcpize: [{cgroup: /a}]":                                                                                                                               `mptcpize[0]: a cgroup v2 path from the hierarchy's root`,
		"mptcpize: yes":                                                                                                                                          `mptcpize[0]: "yes" is not absolute`,
	}
	checkConfigs(t, policy.Env{}, cases, nil)
}
