// Anchor for the precompiled-header target (see CMakeLists.txt); contains no code.
