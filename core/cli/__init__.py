"""The core's command line: what every package's `mnemo` subcommands share,
`mnemo inspect`, the data commands and `mnemo doctor`'s advice."""
