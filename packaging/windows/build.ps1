# Build Smolchat's Windows installer (run from the repository root in PowerShell):
#   powershell -ExecutionPolicy Bypass -File packaging\windows\build.ps1 [-Variant cuda|cpu]
# Needs: Python 3.11 x64 (python.org), Inno Setup 6 (iscc.exe on PATH or in its default folder),
# and for the CUDA variant nothing else: the CUDA torch wheel bundles its CUDA/cuDNN DLLs.
param([ValidateSet("cuda", "cpu")] [string] $Variant = "cuda")
$ErrorActionPreference = "Stop"

py -3.11 -m venv .venv-win
if ($Variant -eq "cuda") {
    # CUDA 12.8 build of the same torch version; it runs on CPU-only PCs too (device falls back).
    .venv-win\Scripts\pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128
} else {
    .venv-win\Scripts\pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
}
.venv-win\Scripts\pip install -e ".[package]"

.venv-win\Scripts\python packaging\icons.py --ico packaging\windows\smolchat.ico
$env:SMOLCHAT_BUILD_VARIANT = $Variant   # "cuda" keeps torch's CUDA DLLs (see packaging\exclusions.py)
.venv-win\Scripts\python -m PyInstaller packaging\smolchat.spec --noconfirm --distpath dist --workpath build\pyinstaller

# Smoke test of the frozen app before packaging it (set SMOLCHAT_TEST_MODEL to a model folder).
if ($env:SMOLCHAT_TEST_MODEL) {
    dist\smolchat\smolchat-console.exe --self-test --gui --model $env:SMOLCHAT_TEST_MODEL
    if ($LASTEXITCODE -ne 0) { throw "self-test failed" }
}

$version = (.venv-win\Scripts\python -c "import tomllib;print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")
$iscc = (Get-Command iscc -ErrorAction SilentlyContinue).Source
if (-not $iscc) { $iscc = "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe" }
& $iscc "/DAppVersion=$version" "/DVariant=$Variant" packaging\windows\smolchat.iss
if ($LASTEXITCODE -ne 0) { throw "iscc failed" }
Get-ChildItem dist\Smolchat-*-setup*
