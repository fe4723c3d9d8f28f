; Inno Setup 6 script for Smolchat on Windows (x64). Build with packaging\windows\build.ps1, which
; runs PyInstaller first (dist\smolchat\ with smolchat.exe and smolchat-console.exe), then:
;   iscc /DAppVersion=0.1.0 packaging\windows\smolchat.iss
; Output: dist\Smolchat-<version>-windows-x64-setup.exe (plus -N.bin slices for a CUDA build over 2 GB).

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
#ifndef Variant
  #define Variant "cuda"
#endif
#define Root "..\.."

[Setup]
AppId={{6E1B3C52-6C1F-4B8E-9F5E-5D0B7A3C2E11}
AppName=Smolchat
AppVersion={#AppVersion}
AppVerName=Smolchat {#AppVersion}
AppPublisher=Smolchat developers
AppComments=Private, local multimodal chat (SmolVLM on your own GPU or CPU)
DefaultDirName={autopf}\Smolchat
DefaultGroupName=Smolchat
DisableProgramGroupPage=yes
; Per-user install without admin rights by default; admins may choose "all users".
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0
OutputDir={#Root}\dist
OutputBaseFilename=Smolchat-{#AppVersion}-windows-x64-{#Variant}-setup
SetupIconFile={#Root}\packaging\windows\smolchat.ico
UninstallDisplayIcon={app}\smolchat.exe
Compression=lzma2/max
SolidCompression=yes
LZMANumBlockThreads=4
; A CUDA torch makes the app folder ~4 GB: setup.exe cannot exceed 2 GB, so it is sliced into
; Smolchat-...-setup.exe + Smolchat-...-setup-1.bin ... (ship them side by side).
DiskSpanning=yes
DiskSliceSize=max
WizardStyle=modern
ChangesAssociations=no
CloseApplications=yes

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
; The whole PyInstaller folder. Nothing is ever written here at run time: conversations and
; settings go to %LOCALAPPDATA%\Smolchat, models to %LOCALAPPDATA%\Smolchat\models and the
; Hugging Face cache (%USERPROFILE%\.cache\huggingface).
Source: "{#Root}\dist\smolchat\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\Smolchat"; Filename: "{app}\smolchat.exe"; WorkingDir: "{userdocs}"
Name: "{group}\Smolchat self-test"; Filename: "{cmd}"; Parameters: "/k ""{app}\smolchat-console.exe"" --self-test"; WorkingDir: "{userdocs}"
Name: "{group}\{cm:UninstallProgram,Smolchat}"; Filename: "{uninstallexe}"
Name: "{autodesktop}\Smolchat"; Filename: "{app}\smolchat.exe"; Tasks: desktopicon; WorkingDir: "{userdocs}"

[Run]
Filename: "{app}\smolchat.exe"; Description: "{cm:LaunchProgram,Smolchat}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; Only what the app could have left beside itself (nothing, by design). User data is kept.
Type: filesandordirs; Name: "{app}\_internal\__pycache__"
