//go:build soak

package crashtest

// DefaultPoints is the number of crash points a campaign checks by
// default; the soak build (-tags soak) runs the long campaign.
const DefaultPoints = 12000

// appendSeeds is the number of seeds TestTargetedConcurrentAppends runs for
// each case and policy by default (the soak build runs 12).
const appendSeeds = 12

// DefaultEtcdPoints is the number of crash points TestCampaignEtcd checks
// by default (the soak build runs this many).
const DefaultEtcdPoints = 600
