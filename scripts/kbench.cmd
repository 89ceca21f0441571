@echo off
rem kbench from a checkout on Windows (cmd or PowerShell): creates the environments on
rem first use (quick when they exist), then runs the CLI under the Keras 3 environment.
rem Try: scripts\kbench demo
setlocal
call "%~dp0setup_envs.cmd"
if errorlevel 1 exit /b %ERRORLEVEL%
set "KBENCH_ENVS=%KBENCH_ENVS_DIR%"
if "%KBENCH_ENVS%"=="" set "KBENCH_ENVS=%~dp0..\envs"
"%KBENCH_ENVS%\keras3\Scripts\python.exe" -m kbench %*
exit /b %ERRORLEVEL%
