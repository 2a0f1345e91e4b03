package linkemu

import (
	"fmt"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"

	"mpsteer/internal/netnsutil"
)

// OpenTUN creates TUN device dev inside network namespace ns. The device
// lives as long as the returned Device is open. Offloads are on, so the
// kernel hands over GSO super-packets, which the device splits into
// MTU-sized segments before they reach the pipe (loss and rate must see
// real packets).
func OpenTUN(ns, dev string) (Device, error) {
	var d tun.Device
	err := netnsutil.Do(ns, func() error {
		// The device is created in the namespace of whoever opens the clone
		// device, so open and TUNSETIFF both happen here.
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w (is the tun driver available?)", err)
		}
		ifr, err := unix.NewIfreq(dev)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("create TUN device %s: %w", dev, err)
		}
		d, _, err = tun.CreateUnmonitoredTUNFromFD(fd)
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("set up TUN device %s: %w", dev, err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("in namespace %s: %w", ns, err)
	}
	return d, nil
}
