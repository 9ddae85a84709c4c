"""What a training run leaves on disk, read and written through one door: its folder, its owner, its
manifest, its snapshots, its log and metrics, and runs compared side by side."""
