@echo off
rem Creates kbench's Python environments (envs\keras3, envs\mxnet) on Windows: a thin
rem wrapper around `python -m kbench.setup`, the set-up every system uses.
rem
rem Usage: scripts\setup_envs.cmd [keras3] [mxnet] [data] [browser] [compiler]
rem        (default: keras3 mxnet data; scripts\setup_envs.cmd --help says more)
rem Settings, as on Linux: KBENCH_PYTHON, KBENCH_GPU, KBENCH_MXNET_WHEEL, KBENCH_ENVS_DIR,
rem KBENCH_SETUP_DRY_RUN (in PowerShell: $env:KBENCH_GPU = "1").
setlocal
set "KBENCH_ROOT=%~dp0.."
set "PYTHONPATH=%KBENCH_ROOT%;%PYTHONPATH%"
rem The Python launcher (py) where it is installed, else python on the PATH.
set "KBENCH_SETUP_PY=python"
where py >nul 2>nul && set "KBENCH_SETUP_PY=py -3"
%KBENCH_SETUP_PY% -m kbench.setup %*
exit /b %ERRORLEVEL%
