//go:build !soak

package crashtest

// DefaultPoints is the number of crash points a campaign checks by
// default: what CI runs. Build with -tags soak for the long campaign.
const DefaultPoints = 2000
