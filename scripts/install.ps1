# Installs the Windows node: copies it into Program Files (or -Dir) as
# orchestrator-zero-node.exe, the name the relay route's firewall rule
# names, and prints the first two lines of its `sandbox check` (the tier
# and what Windows has), as the node reports them.
#
#   powershell -ExecutionPolicy Bypass -File install.ps1 -Exe .\orchestrator-zero-node.exe
#
# Writing under Program Files needs an elevated PowerShell; -Dir names a
# folder of yours instead. Nothing else on the machine changes: no
# service, no firewall rule. Not run in CI (no PowerShell there).
param(
    [Parameter(Mandatory = $true)][string]$Exe,
    [string]$Dir = (Join-Path $env:ProgramFiles 'Orchestrator Zero')
)
$ErrorActionPreference = 'Stop'
if (-not (Test-Path -LiteralPath $Exe -PathType Leaf)) {
    throw "install.ps1: no such file: $Exe (name the node's .exe to install with -Exe)"
}
New-Item -ItemType Directory -Force -Path $Dir | Out-Null
$dest = Join-Path $Dir 'orchestrator-zero-node.exe'
Copy-Item -LiteralPath $Exe -Destination $dest -Force
# `sandbox check` exits 1 without a proven tier 1, which every Windows
# node is until PSEC runs work: its lines are what matters here.
$lines = @(& $dest sandbox check 2>$null)
if ($lines.Count -lt 2) {
    throw "install.ps1: $dest sandbox check printed no report; run it by hand to see why"
}
$lines[0..1] | ForEach-Object { Write-Output $_ }
Write-Output "Installed $dest. To join an edge: & '$dest' run --edge https://EDGE:PORT --tenant TENANT --enrolment-token-file FILE"
