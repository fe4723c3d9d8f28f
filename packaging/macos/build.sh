#!/usr/bin/env bash
# Build Smolchat.app and a drag-to-Applications .dmg on macOS (run from the repository root):
#   packaging/macos/build.sh
# Needs: Xcode command line tools (iconutil, hdiutil, codesign) and Python 3.11 for the Mac's own
# architecture (arm64 on Apple silicon: the MPS build). Optional: SIGN_IDENTITY="Developer ID
# Application: ..." and NOTARY_PROFILE (a `xcrun notarytool store-credentials` profile) to sign and
# notarize; without them the app is signed ad hoc (runs on this Mac, Gatekeeper warns elsewhere).
set -euo pipefail
cd "$(dirname "$0")/../.."

python3.11 -m venv .venv-mac
# The default macOS wheel includes MPS (Apple GPU) support; no index URL needed.
.venv-mac/bin/pip install -q torch==2.13.0 -e ".[package]"

rm -rf build/smolchat.iconset
.venv-mac/bin/python packaging/icons.py --iconset build/smolchat.iconset
iconutil -c icns build/smolchat.iconset -o packaging/macos/smolchat.icns

.venv-mac/bin/python -m PyInstaller packaging/smolchat.spec --noconfirm --distpath dist --workpath build/pyinstaller
app=dist/Smolchat.app

# Smoke test of the bundle (MPS: device "mps", dtype bfloat16) when a model folder is given.
if [ -n "${SMOLCHAT_TEST_MODEL:-}" ]; then
  "$app/Contents/MacOS/smolchat" --self-test --gui --model "$SMOLCHAT_TEST_MODEL"
fi

identity="${SIGN_IDENTITY:--}"
codesign --force --deep --options runtime --timestamp=none \
  --entitlements packaging/macos/entitlements.plist --sign "$identity" "$app"

version=$(.venv-mac/bin/python -c "import tomllib;print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")
dmg="dist/Smolchat-$version-macos-$(uname -m).dmg"
staging=build/dmg
rm -rf "$staging" "$dmg" && mkdir -p "$staging"
cp -R "$app" "$staging/" && ln -s /Applications "$staging/Applications"
hdiutil create -volname Smolchat -srcfolder "$staging" -ov -format UDZO "$dmg"

if [ "$identity" != "-" ] && [ -n "${NOTARY_PROFILE:-}" ]; then
  codesign --sign "$identity" "$dmg"
  xcrun notarytool submit "$dmg" --keychain-profile "$NOTARY_PROFILE" --wait
  xcrun stapler staple "$dmg"
fi
ls -lh "$dmg"
