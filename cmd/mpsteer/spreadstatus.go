package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"mpsteer/internal/api"
)

// printSpreadStatus prints the spread policy's datapath counters: per
// uplink the subflows it was given and the packets marked for it.
func printSpreadStatus(p api.PolicyStatus) {
	var st struct {
		From      []string `json:"from"`
		Installed bool     `json:"installed"`
		Datapath  struct {
			Uplinks []struct {
				Dev                            string `json:"dev"`
				Alive                          bool   `json:"alive"`
				Flows, Joins, Learned, Packets uint64
			} `json:"uplinks"`
			Counters map[string]uint64 `json:"counters"`
		} `json:"datapath"`
	}
	b, err := json.Marshal(p.Status)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return
	}
	if !st.Installed {
		fmt.Println("spread: datapath not installed")
		return
	}
	fmt.Printf("spread: subflows of VMs on %s, per uplink:\n", strings.Join(st.From, ", "))
	for _, u := range st.Datapath.Uplinks {
		state := ""
		if !u.Alive {
			state = " (down: new subflows skip it)"
		}
		fmt.Printf("  %-15s %d connections, %d joins from VMs; %d subflows from remote hosts; %d packets marked%s\n",
			u.Dev, u.Flows, u.Joins, u.Learned, u.Packets, state)
	}
	if c := st.Datapath.Counters; c["not_mptcp"]+c["not_via_uplink"]+c["no_live_uplink"] > 0 {
		fmt.Printf("  left alone: %d TCP SYNs without MPTCP, %d not behind an uplink, %d with every uplink down\n",
			c["not_mptcp"], c["not_via_uplink"], c["no_live_uplink"])
	}
}
