#!/bin/sh
echo legacy
