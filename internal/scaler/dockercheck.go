package scaler

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// CheckConfig refuses, at start, a docker scaler whose containers could not
// reach the server (B186): on any network but the host's, a container's
// loopback is its own, so a server_url on 127.0.0.1, ::1 or localhost — or
// none, which defaults to the server's own listen address — would leave
// every agent dialing nothing until its spawn timed out.
func (d *Docker) CheckConfig(c Config) error {
	network := c.Network
	if network == "" || network == DefaultDockerNetwork {
		return nil
	}
	if network == "none" {
		return fmt.Errorf("scalers (%s).network: a docker scaler on network \"none\" has agents that cannot reach the server; use \"host\" (the default) or a network that reaches server_url", c.Name)
	}
	if c.ServerURL == "" {
		return fmt.Errorf("scalers (%s).server_url: a docker scaler on network %q needs a server_url its containers reach (the server's own listen address is the host's loopback, not theirs)", c.Name, network)
	}
	u, err := url.Parse(c.ServerURL)
	if err != nil {
		return fmt.Errorf("scalers (%s).server_url: %v", c.Name, err)
	}
	if loopback(u.Hostname()) {
		return fmt.Errorf("scalers (%s).server_url: %q is the host's loopback, which containers on network %q cannot reach; use network \"host\" or an address of the host they reach", c.Name, c.ServerURL, network)
	}
	return nil
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}
