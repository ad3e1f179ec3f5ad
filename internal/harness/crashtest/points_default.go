//go:build !soak

package crashtest

// DefaultPoints is the number of crash points a campaign checks by
// default: what CI runs. Build with -tags soak for the long campaign.
const DefaultPoints = 2000

// appendSeeds is the number of seeds TestTargetedConcurrentAppends runs for
// each case and policy by default (CI runs 1).
const appendSeeds = 1

// DefaultEtcdPoints is the number of crash points TestCampaignEtcd checks
// by default (CI runs this many).
const DefaultEtcdPoints = 40
