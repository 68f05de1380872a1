// SPDX-License-Identifier: Apache-2.0

package main

type Exercise struct{ ID, Step string }

var exercises = []Exercise{
	{ID: "01.1", Step: "01-first"},
	{ID: "02.1", Step: "02-second"},
}
